-- Decisions: questions a run asks its owner. Keep this file's meaning equal to the other
-- backend's 0004.

-- One question of one attempt of a job. `action_json` is the exact action the device will
-- take when allowed (shown on "Needs me"); `action_hash` is its canonical SHA-256, which the
-- device checks an answer against. `answered_at` is when it left `pending`, however it did.
CREATE TABLE decisions (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    job_id TEXT NOT NULL REFERENCES jobs (id),
    device_id TEXT NOT NULL REFERENCES devices (id),
    attempt BIGINT NOT NULL,
    kind TEXT NOT NULL,
    question TEXT NOT NULL,
    action_json TEXT NOT NULL,
    action_hash TEXT NOT NULL,
    -- pending, answered, expired or withdrawn
    state TEXT NOT NULL,
    -- allow or deny, once or session, web or computer: set only when answered
    answer TEXT,
    scope TEXT,
    answered_by TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    answered_at BIGINT
);
CREATE INDEX decisions_account_state ON decisions (account_id, state, created_at);
CREATE INDEX decisions_account_job ON decisions (account_id, job_id, created_at);
-- The sweeper's question across accounts: which pending decisions are overdue.
CREATE INDEX decisions_state_expires ON decisions (state, expires_at);
