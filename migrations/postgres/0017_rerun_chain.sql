-- Re-runs and the numbering of a chain of runs. Keep this file's meaning equal to the other
-- backend's 0017.

-- The earlier job a re-run runs again (same account and computer), as `continues` names
-- the job a follow-up carries on from.
ALTER TABLE jobs ADD COLUMN rerun_of TEXT;
CREATE INDEX jobs_rerun_of ON jobs (rerun_of);

-- A chain is the first job and every re-run or follow-up made from it or from one of them.
-- `chain_root` is that first job (NULL on the first job itself, and on jobs made before
-- chains were numbered); `chain_run` is the job's run number in it, given when the job is
-- made (the first job counts as run 1 without a number stored).
ALTER TABLE jobs ADD COLUMN chain_root TEXT;
ALTER TABLE jobs ADD COLUMN chain_run BIGINT;
CREATE INDEX jobs_chain_root ON jobs (chain_root);
