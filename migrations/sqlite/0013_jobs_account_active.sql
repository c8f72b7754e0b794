-- The claim's run-limit count and the wake-up after a run ends ask for an account's
-- queued, running and waiting jobs. Without this index they read every job the account
-- ever had. (A full index here: SQLite would not prove `state = 'queued'` implies a partial
-- index's `state IN (…)`.) Keep this file's meaning equal to the other backend's 0013.
CREATE INDEX jobs_account_active ON jobs (account_id, state, device_id);
