-- Outage recovery (reattach and resume). Keep this file's meaning equal to sqlite/0002.

-- The hash of the last lease issued for the current attempt. Unlike lease_token_hash it
-- survives the attempt's interruption, so a run that kept going can prove it held it.
ALTER TABLE jobs ADD COLUMN last_lease_hash TEXT;
-- Why the job ended: device (its own completion), owner (cancelled while queued),
-- lease_expired (swept) or revoked (the device was revoked). NULL while unfinished.
ALTER TABLE jobs ADD COLUMN end_cause TEXT;
-- Automatic carry-ons (resume) this job has had.
ALTER TABLE jobs ADD COLUMN resumes BIGINT NOT NULL DEFAULT 0;

UPDATE jobs SET last_lease_hash = lease_token_hash WHERE lease_token_hash IS NOT NULL;
-- Jobs interrupted before this migration keep end_cause NULL: they are never revived.
