-- Two costs every job paid on rows other than its own.
--
-- A progress batch moves the running job's lease expiry. While `lease_expires_at` was in an
-- index, every batch wrote a new entry into each of the table's indexes; with it in none,
-- PostgreSQL rewrites the row in place on its page (a HOT update: fillfactor 80, set in
-- 0013, leaves the room). The sweeper looks for expired leases among the going jobs only, at
-- most one per running computer, which this partial index lists; it reads the expiries from
-- the rows. Nothing in the index changes while a job runs.
DROP INDEX IF EXISTS jobs_state_lease;
CREATE INDEX jobs_going ON jobs (state) WHERE state IN ('running', 'waiting');

-- A foreign key check locks the parent row (`FOR KEY SHARE`), and on PostgreSQL a row lock
-- is a write to that row. Every job queued locked its account and its device, every ledger
-- entry its account and every timeline line its job: the account row is the one every claim
-- locks to keep the run limit, and the device row the one its heartbeats update, so the
-- busiest rows were written by every insert and their locks shared through multixacts.
-- Accounts, devices and jobs are never deleted, and each of these inserts takes its parent's
-- id from the row it was checked against in the same request (the device it was queued for,
-- the job it belongs to), so the checks could only fail on a row that cannot go away.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_account_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_device_id_fkey;
ALTER TABLE job_events DROP CONSTRAINT IF EXISTS job_events_job_id_fkey;
ALTER TABLE ledger DROP CONSTRAINT IF EXISTS ledger_account_id_fkey;

-- Only re-runs and follow-ups name an earlier job, so these columns are empty on nearly every
-- row; indexed whole, each queued, claimed and ended job wrote an entry of nothing into each
-- of the three. The lookups ask for a given job (`= $1`), which implies the predicate.
DROP INDEX IF EXISTS jobs_rerun_of;
CREATE INDEX jobs_rerun_of ON jobs (rerun_of) WHERE rerun_of IS NOT NULL;
DROP INDEX IF EXISTS jobs_chain_root;
CREATE INDEX jobs_chain_root ON jobs (chain_root) WHERE chain_root IS NOT NULL;
DROP INDEX IF EXISTS jobs_continues;
CREATE UNIQUE INDEX jobs_continues ON jobs (continues) WHERE continues IS NOT NULL;

-- A run's end asks whether the job has a decision (pending ones hold the end back). No index
-- began with the job, so each end read a whole index of decisions.
CREATE INDEX decisions_job ON decisions (job_id, state);
