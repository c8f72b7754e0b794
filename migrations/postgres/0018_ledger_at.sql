-- The platform admin's ledger, every account's newest entries first. Keep this file's
-- meaning equal to the other backend's 0018.
CREATE INDEX ledger_at ON ledger (at);
