-- A claim on PostgreSQL is one call of this function: one round trip, one transaction.
--
-- The account's run limit must hold across devices and replicas, so a claim counts the
-- account's going runs after taking the account's row lock. A count read in the same
-- statement as the lock would use the snapshot taken before the wait and could miss a claim
-- committed meanwhile; each statement in a plpgsql function takes a fresh snapshot (READ
-- COMMITTED), so the count after `FOR NO KEY UPDATE` sees every claim that held the lock
-- before. The checks before the lock read without one: most claims find nothing queued (or
-- the account full) and then must not wait for the lock.
--
-- Answers the claimed row after the claim (state `running`, the new attempt), or no row.
-- The claim's timeline line is written with it, numbered after the job's last event.
-- PostgreSQL only: SQLite's one writer takes claims in turn inside a transaction instead.
CREATE FUNCTION tether_claim(
    p_device TEXT,
    p_account TEXT,
    p_limit BIGINT,
    p_lease_hash TEXT,
    p_lease_until BIGINT,
    p_now BIGINT
) RETURNS SETOF jobs
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    going BIGINT;
BEGIN
    PERFORM 1 FROM jobs
        WHERE device_id = p_device AND state = 'queued'
        AND (continues IS NULL OR NOT EXISTS (SELECT 1 FROM jobs AS earlier
            WHERE earlier.id = jobs.continues AND earlier.state IN ('queued', 'running', 'waiting')));
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT COUNT(*) INTO going FROM jobs
        WHERE account_id = p_account AND state IN ('running', 'waiting');
    IF going >= p_limit THEN
        RETURN;
    END IF;
    PERFORM 1 FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    SELECT COUNT(*) INTO going FROM jobs
        WHERE account_id = p_account AND state IN ('running', 'waiting');
    IF going >= p_limit THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH picked AS (
        SELECT id FROM jobs
        WHERE device_id = p_device AND state = 'queued'
        AND (continues IS NULL OR NOT EXISTS (SELECT 1 FROM jobs AS earlier
            WHERE earlier.id = jobs.continues AND earlier.state IN ('queued', 'running', 'waiting')))
        ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1,
            lease_token_hash = p_lease_hash, last_lease_hash = p_lease_hash,
            lease_expires_at = p_lease_until, started_at = COALESCE(jobs.started_at, p_now),
            progress_seq = 0, event_seq = jobs.event_seq + 1
        FROM picked WHERE jobs.id = picked.id
        RETURNING jobs.*
    ), line AS (
        INSERT INTO job_events (job_id, account_id, at, kind, seq, text)
        SELECT claimed.id, claimed.account_id, p_now, 'system', claimed.event_seq,
            'Claimed by the device (attempt ' || claimed.attempt || ').'
        FROM claimed
    )
    SELECT * FROM claimed;
END;
$$;

-- A timeline line's account is its job's: the job's key already ties them, and checking
-- the account's key again on every line (the busiest insert there is) cost a lookup each.
ALTER TABLE job_events DROP CONSTRAINT IF EXISTS job_events_account_id_fkey;
