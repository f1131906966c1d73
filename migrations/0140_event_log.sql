-- The organization's event log behind `GET /v1/events` (Server-Sent Events): one row per event
-- (every accepted email's event and every organization event, whether or not an endpoint receives
-- it), kept 72 hours. An event that has a delivery keeps its payload there (`delivery_id`); one
-- without a delivery carries its payload itself, so the ingest path never writes a payload twice.
--
-- Order without gaps: a row's `xid` is the transaction that wrote it. A reader only takes rows of
-- transactions older than the oldest one still running (`pg_snapshot_xmin`), in (xid, seq) order,
-- so a transaction that commits late can never land behind a position a reader already passed.
CREATE TABLE org_events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  event_id text NOT NULL,
  event_type text NOT NULL,
  delivery_id uuid REFERENCES deliveries (id) ON DELETE SET NULL,
  payload text,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX org_events_position ON org_events (org_id, xid, seq);
CREATE UNIQUE INDEX org_events_event ON org_events (org_id, event_id);
CREATE INDEX org_events_created ON org_events (created_at);

-- Every first delivery of an event (not a replay) logs the event; an event delivered to several
-- endpoints is logged once.
CREATE FUNCTION org_events_from_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO org_events (org_id, event_id, event_type, delivery_id, created_at)
  VALUES (NEW.org_id, NEW.event_id, NEW.event_type, NEW.id, NEW.created_at)
  ON CONFLICT (org_id, event_id) DO NOTHING;
  RETURN NEW;
END
$$;
CREATE TRIGGER deliveries_org_events AFTER INSERT ON deliveries
  FOR EACH ROW WHEN (NEW.replay_of IS NULL) EXECUTE FUNCTION org_events_from_delivery();

-- Waiting readers are woken on the channel `mailroom_listen` uses, with `events:<org id>` as payload
-- (delivered at commit, once per distinct payload per transaction).
CREATE FUNCTION org_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('mailroom_listen', 'events:' || NEW.org_id::text);
  RETURN NEW;
END
$$;
CREATE TRIGGER org_events_notify AFTER INSERT ON org_events
  FOR EACH ROW EXECUTE FUNCTION org_events_notify();
