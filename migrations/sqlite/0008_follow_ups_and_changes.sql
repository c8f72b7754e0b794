-- Follow-up jobs and what a run changed. Keep this file's meaning equal to the other
-- backend's 0008.

-- The earlier job a follow-up continues (same account, computer and folder); a job has at
-- most one follow-up. A follow-up is not claimed before the earlier job ended.
ALTER TABLE jobs ADD COLUMN continues TEXT;
CREATE UNIQUE INDEX jobs_continues ON jobs (continues);

-- What the run changed in its folder, as its computer reported it: metadata only (paths,
-- statuses, line counts, flags), never file text.
ALTER TABLE jobs ADD COLUMN changes_json TEXT;
