-- The service's master key when none is configured (MAILROOM_SECRET_KEY): made once, shared by
-- every process. IF NOT EXISTS: another migration may create the same table first.
CREATE TABLE IF NOT EXISTS service_keys (
  name text PRIMARY KEY,
  key bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- After a rotation the replaced webhook secret still signs deliveries (as a second v1) until
-- webhook_secret_previous_expires_at. Both secrets are stored sealed (AES-256-GCM, `v1:` prefix);
-- values written before sealing existed are sealed by the service at start-up.
ALTER TABLE organizations
  ADD COLUMN webhook_secret_previous text,
  ADD COLUMN webhook_secret_previous_expires_at timestamptz;

-- The signature debugger finds the delivered bytes of an event by its id.
CREATE INDEX IF NOT EXISTS deliveries_org_event ON deliveries (org_id, event_id);
