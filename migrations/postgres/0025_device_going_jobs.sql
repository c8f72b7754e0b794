-- Every query that finds a device's jobs by device asks for going ones: the claim and its
-- checks (`state = 'queued'`), the device's queue count, revocation's going runs and the
-- outage check (`state IN ('running', 'waiting')`); each implies this predicate. Indexed
-- whole, each ended job wrote an entry that no query reads, and the index grew with the
-- history instead of with the work in flight. (The job list's optional device filter reads
-- the account's index, `jobs_account_created`.) SQLite keeps its full index: it would not
-- prove that `state = 'queued'` implies `state IN (…)`.
DROP INDEX IF EXISTS jobs_device_state;
CREATE INDEX jobs_device_going ON jobs (device_id, state, created_at)
    WHERE state IN ('queued', 'running', 'waiting');
