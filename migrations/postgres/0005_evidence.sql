-- Evidence: files a run attached to its result. Keep this file's meaning equal to the other
-- backend's 0005.

-- One file of a job, by the id its device chose. The bytes live in the blob store under the
-- data dir (blobs/sha256/…, by `sha256`); `kept_local` = 1 is a description only: the file
-- stayed on the computer (evidence upload off there), and no blob exists for it.
CREATE TABLE evidence (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    id TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    attempt BIGINT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    size BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    -- Sniffed from the bytes; for a kept_local item, what the device said.
    mime TEXT,
    caption TEXT,
    kept_local BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, id)
);
