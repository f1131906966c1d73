-- Waiting listen polls are woken by NOTIFY instead of re-querying: the fan-out trigger announces,
-- on channel `mailroom_listen` with the organization id as payload, that sessions of that
-- organization got a copy. Delivered at commit, once per distinct payload per transaction.
CREATE OR REPLACE FUNCTION listen_fanout() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO listen_events (session_id, delivery_id)
  SELECT s.id, NEW.id FROM listen_sessions s
  WHERE s.org_id = NEW.org_id AND s.expires_at > now();
  IF FOUND THEN
    PERFORM pg_notify('mailroom_listen', NEW.org_id::text);
  END IF;
  RETURN NEW;
END
$$;
