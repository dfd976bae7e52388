-- The purge walks operators' slot repairs by slot (slotflow_api.retention.PURGE_SLOT_REPAIRS),
-- across schedules, as it walks skipped slots.
CREATE INDEX slot_repairs_slot ON {schema}.slot_repairs (slot);
