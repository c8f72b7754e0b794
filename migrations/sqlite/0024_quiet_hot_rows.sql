-- A progress batch moves the running job's lease expiry. While `lease_expires_at` was in an
-- index, every batch rewrote that index's entry as well as the row. The sweeper looks for
-- expired leases among the going jobs only, which an index on the state finds; it reads the
-- expiries from the rows. (A full index: SQLite would not prove a query's
-- `state IN (…)` implies a partial index's.) The other backend's 0024 also drops foreign
-- keys of its busiest inserts; SQLite checks a key without locking the parent row, and
-- dropping one would rebuild the table, so they stay here.
DROP INDEX IF EXISTS jobs_state_lease;
CREATE INDEX jobs_going ON jobs (state);

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
