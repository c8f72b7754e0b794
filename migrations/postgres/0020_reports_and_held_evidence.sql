-- What the work hands back: the worker's report (kept in jobs.outcome_json), what each
-- attempt used, and evidence held on the computer. Keep this file's meaning equal to the
-- other backend's 0020.

-- What each attempt really used, as its agent said: a JSON array of
-- {attempt, engine?, engineVersion?, model?, effort?, mode?}, one entry per attempt.
ALTER TABLE jobs ADD COLUMN observed_json TEXT;

-- A held file (held = 1) is a description only, like kept_local, but its owner may
-- preview, release or discard it on the computer. Released: held = 0, the bytes are in
-- the blob store, released_at says when. A variant (a screenshot's preview picture) names
-- the file it was made from.
ALTER TABLE evidence ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE evidence ADD COLUMN released_at BIGINT;
ALTER TABLE evidence ADD COLUMN variant_of TEXT;
ALTER TABLE evidence ADD COLUMN variant TEXT;
ALTER TABLE evidence ADD COLUMN details_json TEXT;
