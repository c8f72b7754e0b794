-- The claim's run-limit count and the wake-up after a run ends ask for an account's
-- queued, running and waiting jobs. Without this index they read every job the account
-- ever had. Partial: it holds only jobs that are not over, so it stays small as history
-- grows. Room on each page keeps the frequent updates of a running job (timeline numbers,
-- progress) in place. Keep this file's meaning equal to the other backend's 0013.
CREATE INDEX jobs_account_active ON jobs (account_id, state, device_id)
    WHERE state IN ('queued', 'running', 'waiting');
ALTER TABLE jobs SET (fillfactor = 80);
