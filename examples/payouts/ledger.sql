-- The payouts ledger: the independent record of money sent. Two protections, each for its bug:
--   run_id UNIQUE      - every claimer names a slot's payout the same way, so a failover's second
--                        write collapses onto the first row instead of adding a second payout;
--   fence_token        - the highest claim that wrote the row; fenced_upsert refuses a lower one,
--                        so a frozen claimer waking after a takeover cannot overwrite it.
CREATE TABLE IF NOT EXISTS payouts_ledger (
    payout_id    bigserial   PRIMARY KEY,
    run_id       text        NOT NULL UNIQUE,
    merchant_id  text        NOT NULL,
    amount_cents bigint      NOT NULL CHECK (amount_cents > 0),
    currency     text        NOT NULL,
    fence_token  bigint      NOT NULL,
    paid_by      text        NOT NULL,
    paid_at      timestamptz NOT NULL DEFAULT now()
);
