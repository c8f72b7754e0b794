-- Web Push subscriptions and the computer outages they were told about. Keep this file's
-- meaning equal to the other backend's 0009.

-- A browser's subscription. The endpoint is a capability URL (whoever has it can message
-- the browser) and p256dh/auth are the browser's message keys: stored, never logged, never
-- answered (the API shows the endpoint's origin only). One row per endpoint per account;
-- subscribing again updates it. The wants_* flags (1 or 0) are the kinds it is sent.
CREATE TABLE push_subscriptions (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    endpoint TEXT NOT NULL,
    p256dh TEXT NOT NULL,
    auth TEXT NOT NULL,
    name TEXT,
    wants_decision BIGINT NOT NULL DEFAULT 1,
    wants_job_ended BIGINT NOT NULL DEFAULT 1,
    wants_device_offline BIGINT NOT NULL DEFAULT 1,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    last_success_at BIGINT,
    UNIQUE (account_id, endpoint)
);

-- The outage of a computer its owner was last told about, named by the computer's last
-- contact time then: a computer is reported offline once per outage, by one replica.
CREATE TABLE push_outages (
    device_id TEXT PRIMARY KEY REFERENCES devices (id),
    last_seen_at BIGINT NOT NULL
);
