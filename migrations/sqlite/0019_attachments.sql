-- Files a person attaches to a job's task. Keep this file's meaning equal to the other
-- backend's 0019.

-- An upload waits for its job with job_id NULL, and expires unused after an hour; a job
-- takes it by setting job_id (and its place in the job's list). The bytes are in the blob
-- store under sha256, shared with evidence: a blob goes only when no row names it.
CREATE TABLE attachments (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    job_id TEXT REFERENCES jobs (id) ON DELETE CASCADE,
    position BIGINT,
    name TEXT NOT NULL,
    size BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    media_type TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    -- Set when its owner removed an upload no job took: it is gone for them at once, and
    -- swept an hour later like an expired one, so its blob is old enough to go too.
    dropped_at BIGINT
);
CREATE INDEX attachments_job ON attachments (job_id, position);
CREATE INDEX attachments_waiting ON attachments (created_at) WHERE job_id IS NULL;
CREATE INDEX attachments_sha256 ON attachments (sha256);
CREATE INDEX evidence_sha256 ON evidence (sha256);
