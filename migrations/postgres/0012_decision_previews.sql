-- A file write's proposed change (a redacted unified diff, at most 32 KiB), shown while
-- the question is open. File text stays on the server no longer than that: the trigger
-- clears it in the statement that moves the decision out of `pending`, whichever code
-- settles it (an answer, a close, the sweeper's expiry, a run's end). Keep this file's
-- meaning equal to the other backend's 0012.
ALTER TABLE decisions ADD COLUMN preview TEXT;

CREATE FUNCTION decisions_drop_preview() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.preview := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER decisions_drop_preview BEFORE UPDATE ON decisions
FOR EACH ROW WHEN (NEW.state <> 'pending')
EXECUTE FUNCTION decisions_drop_preview();
