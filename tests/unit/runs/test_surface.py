"""A handler author's first import works: `slotflow.runs` holds what a handler needs."""

import slotflow.errors
import slotflow.runs


def test_the_error_types_a_handler_raises_are_importable_from_slotflow_runs() -> None:
    from slotflow.runs import FenceRejected, PermanentError, RunContext, TransientError, handler

    assert (TransientError, PermanentError, FenceRejected) == (
        slotflow.errors.TransientError,
        slotflow.errors.PermanentError,
        slotflow.errors.FenceRejected,
    )
    assert callable(handler)
    assert RunContext.__name__ == "RunContext"
    assert {"handler", "RunContext", "TransientError", "PermanentError", "FenceRejected"} <= set(
        slotflow.runs.__all__
    )
