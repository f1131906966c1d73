-- Webhook deliveries: one row per (event, endpoint), claimed by workers in every process with
-- FOR UPDATE SKIP LOCKED and a lease; every HTTP attempt is recorded in delivery_attempts.

CREATE TABLE deliveries (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  email_id uuid REFERENCES emails (id) ON DELETE SET NULL,
  endpoint_id uuid NOT NULL,
  -- Stable across retries and replays (the payload's `id`).
  event_id text NOT NULL,
  event_type text NOT NULL,
  -- The exact JSON body sent on every attempt and replay (signed afresh each time).
  payload text NOT NULL,
  replay_of uuid REFERENCES deliveries (id) ON DELETE SET NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'header_confirmed', 'failed')),
  attempt_count integer NOT NULL DEFAULT 0,
  dispatch_errors integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  lease_owner text,
  lease_expires_at timestamptz,
  duration_ms integer NOT NULL DEFAULT 0,
  last_error text,
  last_error_code text,
  last_status_code integer,
  -- Snapshot for listings: the email's sender, recipient and subject.
  email_sender text NOT NULL DEFAULT '',
  email_recipient text NOT NULL DEFAULT '',
  email_subject text NOT NULL DEFAULT '',
  -- Millisecond precision: list cursors carry it as a JavaScript date.
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
-- The queue scans only pending rows, in due order: finished rows never slow a claim.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_org_created ON deliveries (org_id, created_at DESC, id DESC);
CREATE INDEX deliveries_email ON deliveries (email_id, endpoint_id);

CREATE TABLE delivery_attempts (
  id bigserial PRIMARY KEY,
  delivery_id uuid NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
  attempt integer NOT NULL,
  started_at timestamptz NOT NULL,
  duration_ms integer NOT NULL,
  status_code integer,
  error_code text,
  error text,
  response_excerpt text,
  worker text NOT NULL
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, attempt);
