-- API tokens that expire and show their last use; sign-in failures per email. Keep this
-- file's meaning equal to the other backend's 0007.

-- When the token stops working (unix ms; NULL: until revoked), and the last request it
-- authenticated (written at most once a minute per token; NULL: never used).
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN last_used_at BIGINT;
CREATE INDEX api_tokens_account ON api_tokens (account_id, created_at);

-- Sign-in attempts per email (SHA-256 of the normalised address, so an address typed into
-- the wrong field is not kept), counted before the password is checked and cleared by a
-- success. Past a few, each attempt blocks the next until blocked_until (growing backoff).
CREATE TABLE login_failures (
    email_hash TEXT PRIMARY KEY,
    failures BIGINT NOT NULL,
    last_attempt_at BIGINT NOT NULL,
    blocked_until BIGINT NOT NULL
);
CREATE INDEX login_failures_last_attempt ON login_failures (last_attempt_at);
