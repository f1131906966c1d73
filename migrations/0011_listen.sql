-- `mailroom listen`: a CLI session receives a copy of every delivery of its organization created
-- while it is active. A trigger fans each new delivery out to the active sessions, so nothing in the
-- delivery pipeline has to know about listeners, and a poll takes its session's rows (at most once).

CREATE TABLE listen_sessions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  device_name text,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- Moved forward by every poll; a session nobody polls stops receiving copies after it.
  expires_at timestamptz NOT NULL
);
CREATE INDEX listen_sessions_org ON listen_sessions (org_id, expires_at);

CREATE TABLE listen_events (
  id bigserial PRIMARY KEY,
  session_id uuid NOT NULL REFERENCES listen_sessions (id) ON DELETE CASCADE,
  delivery_id uuid NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX listen_events_session ON listen_events (session_id, id);

CREATE FUNCTION listen_fanout() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO listen_events (session_id, delivery_id)
  SELECT s.id, NEW.id FROM listen_sessions s
  WHERE s.org_id = NEW.org_id AND s.expires_at > now();
  RETURN NEW;
END
$$;

CREATE TRIGGER deliveries_listen_fanout AFTER INSERT ON deliveries
  FOR EACH ROW EXECUTE FUNCTION listen_fanout();
