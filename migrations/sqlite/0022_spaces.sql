-- Shared spaces: accounts that see each other's space jobs (docs/SPACES.md). Keep this
-- file's meaning equal to the other backend's 0022.

CREATE TABLE spaces (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_by TEXT NOT NULL REFERENCES accounts (id),
    created_at BIGINT NOT NULL
);

-- Who is in a space and as what (owner, member, viewer). Removing a row ends the access
-- at once: every read of a space job joins this table.
CREATE TABLE space_members (
    space_id TEXT NOT NULL REFERENCES spaces (id),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    role TEXT NOT NULL,
    joined_at BIGINT NOT NULL,
    PRIMARY KEY (space_id, account_id)
);
CREATE INDEX space_members_account ON space_members (account_id);

-- A single-use invitation link: only the SHA-256 of its secret is kept.
CREATE TABLE space_invitations (
    id TEXT PRIMARY KEY,
    space_id TEXT NOT NULL REFERENCES spaces (id),
    token_hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    invited_by TEXT NOT NULL REFERENCES accounts (id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    used_by TEXT REFERENCES accounts (id)
);
CREATE INDEX space_invitations_space ON space_invitations (space_id, expires_at);

-- What happened in a space (joins, removals, role changes, jobs), for its owners. Names
-- things, never their contents.
CREATE TABLE space_ledger (
    id TEXT PRIMARY KEY,
    space_id TEXT NOT NULL REFERENCES spaces (id),
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    actor_id TEXT NOT NULL REFERENCES accounts (id),
    subject TEXT,
    detail TEXT
);
CREATE INDEX space_ledger_space_at ON space_ledger (space_id, at);

-- The space a job belongs to; NULL for a personal job.
ALTER TABLE jobs ADD COLUMN space_id TEXT REFERENCES spaces (id);
CREATE INDEX jobs_space_created ON jobs (space_id, created_at) WHERE space_id IS NOT NULL;
