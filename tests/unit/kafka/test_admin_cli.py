"""`python -m slotflow.kafka.admin`: arguments refused before any connection is tried."""

import pytest

from slotflow.kafka.admin import main


@pytest.mark.parametrize("value", ["0", "-1", "three"])
def test_a_replication_factor_below_one_or_not_a_number_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ensure-topics", "--replication-factor", value])
    assert exit_.value.code == 2
    assert "--replication-factor" in capsys.readouterr().err
