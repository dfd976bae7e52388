"""The seed's nightly merchant payout as a slotflow handler.

Run a claimer with it:

    PYTHONPATH=examples/payouts SLOTFLOW_CLAIMER_HANDLER_MODULES=payouts python -m slotflow_claimer

The payout is keyed by `ctx.run_id` (the slot label, the same on every claimer and every retry)
and written with `ctx.fenced.upsert`, which stamps it with the run's fencing token. A claimer that
froze with token 7 and wakes up after another claimer took the run over with token 8 gets
`FenceRejected` instead of paying again.
"""

from pathlib import Path
from typing import Any

from slotflow.errors import PermanentError
from slotflow.pg.pool import Conn
from slotflow.runs import RunContext, handler

LEDGER_SQL = (Path(__file__).parent / "ledger.sql").read_text()
LEDGER_TABLE = "payouts_ledger"


async def create_ledger(conn: Conn) -> None:
    """Create the ledger table in the handler database (idempotent)."""
    await conn.execute(LEDGER_SQL)


def _amount(payload: Any) -> int:
    try:
        amount = int(payload["amount_cents"])
    except (KeyError, TypeError, ValueError) as err:
        raise PermanentError(f"payout payload needs an integer amount_cents: {err}") from err
    if amount <= 0:
        # A business rule that says no: retrying cannot change the answer, so it is permanent.
        raise PermanentError(f"refusing to pay a non-positive amount ({amount})")
    return amount


@handler("payouts.pay_merchants")
async def pay_merchants(ctx: RunContext) -> dict[str, Any]:
    """Pay one merchant for this slot, at most once however often the run is attempted."""
    amount = _amount(ctx.payload)
    merchant = str(ctx.payload.get("merchant_id", "")) or ctx.job_id
    row = await ctx.fenced.upsert(
        table=LEDGER_TABLE,
        key={"run_id": ctx.run_id},
        values={
            "merchant_id": merchant,
            "amount_cents": amount,
            "currency": str(ctx.payload.get("currency", "EUR")),
            "paid_by": ctx.owner,
        },
    )
    return {"payout_id": row["payout_id"], "merchant_id": merchant, "amount_cents": amount}
