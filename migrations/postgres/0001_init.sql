-- Walking skeleton: accounts, sign-in, pairing, devices, jobs with leases, the ledger.
-- Times are unix milliseconds (BIGINT), ids and JSON are TEXT, flags are BIGINT 0/1, so a row
-- decodes the same on SQLite and PostgreSQL. Keep this file's meaning equal to sqlite/0001.

CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    email TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    is_admin BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);

CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    user_id TEXT NOT NULL REFERENCES users (id),
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    user_id TEXT NOT NULL REFERENCES users (id),
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

CREATE TABLE devices (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    install_id TEXT NOT NULL,
    name TEXT NOT NULL,
    platform TEXT NOT NULL,
    agent_version TEXT NOT NULL,
    -- NULL between a re-pairing's approval and its redemption: no token works then.
    token_hash TEXT UNIQUE,
    seal_key_json TEXT,
    seal_key_mismatch BIGINT NOT NULL DEFAULT 0,
    capabilities_json TEXT,
    last_seen_at BIGINT,
    revoked_at BIGINT,
    created_at BIGINT NOT NULL,
    UNIQUE (account_id, install_id)
);

CREATE TABLE pairings (
    id TEXT PRIMARY KEY,
    device_code_hash TEXT NOT NULL UNIQUE,
    user_code TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    platform TEXT NOT NULL,
    install_id TEXT NOT NULL,
    agent_version TEXT NOT NULL,
    seal_key_json TEXT NOT NULL,
    interval_secs BIGINT NOT NULL,
    last_poll_at BIGINT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    account_id TEXT REFERENCES accounts (id),
    device_id TEXT REFERENCES devices (id),
    linked_at BIGINT,
    redeemed_at BIGINT
);
CREATE INDEX pairings_expires ON pairings (expires_at);

CREATE TABLE link_failures (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    at BIGINT NOT NULL
);
CREATE INDEX link_failures_account_at ON link_failures (account_id, at);

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    device_id TEXT NOT NULL REFERENCES devices (id),
    title TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    state TEXT NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 0,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    outcome_json TEXT,
    -- Kept after the device completes, so the same complete call can be answered again.
    lease_token_hash TEXT,
    lease_expires_at BIGINT,
    progress_seq BIGINT NOT NULL DEFAULT 0,
    event_seq BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    ended_at BIGINT
);
CREATE INDEX jobs_device_state ON jobs (device_id, state, created_at);
CREATE INDEX jobs_account_created ON jobs (account_id, created_at);
CREATE INDEX jobs_state_lease ON jobs (state, lease_expires_at);

CREATE TABLE job_events (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    seq BIGINT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE ledger (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    detail_json TEXT NOT NULL
);
CREATE INDEX ledger_account_at ON ledger (account_id, at);

-- One row (id = 1): when the sweeper last ran, to notice the server's own outage.
CREATE TABLE server_heartbeat (
    id BIGINT PRIMARY KEY,
    at BIGINT NOT NULL
);
