-- The answer to a creating request sent with `Idempotency-Key`, so a retry after a lost
-- answer gets it again instead of creating twice. One row per account and key: the primary
-- key makes two requests with one key at once yield one creation. `idem_key` is the key's
-- SHA-256 and `answer` is sealed under a key derived from it (an answer can hold a new API
-- token); `status` and `answer` are NULL while the first request is in progress. The
-- sweeper deletes rows older than a day (the created_at index). Keep this file's meaning
-- equal to the other backend's 0015.
CREATE TABLE idempotency_keys (
    account_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    route TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status BIGINT,
    answer TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
