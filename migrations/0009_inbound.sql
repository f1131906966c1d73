-- Inbound mail. One `emails` row per accepted (or spam-rejected) recipient of an SMTP transaction;
-- its raw MIME lives in `email_contents` so listings never read message bodies.

CREATE TABLE emails (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  domain_id uuid,
  recipient text NOT NULL,
  envelope_from text,
  from_address text,
  from_name text,
  to_addresses jsonb NOT NULL DEFAULT '[]',
  cc_addresses jsonb NOT NULL DEFAULT '[]',
  subject text,
  message_id text,
  in_reply_to text,
  "references" jsonb NOT NULL DEFAULT '[]',
  sent_at timestamptz,
  headers jsonb NOT NULL DEFAULT '{}',
  attachments jsonb NOT NULL DEFAULT '[]',
  size_bytes integer NOT NULL,
  spam_score numeric,
  auth jsonb NOT NULL DEFAULT '{}',
  event_type text NOT NULL,
  -- accepted | rejected (spam score above the threshold at ingestion)
  status text NOT NULL CHECK (status IN ('accepted', 'rejected')),
  rejection_reason text,
  parse_error text,
  client_address text,
  helo text,
  content_discarded_at timestamptz,
  -- Millisecond precision: list cursors carry it as a JavaScript date.
  received_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);
CREATE INDEX emails_org_received ON emails (org_id, received_at DESC, id DESC);
CREATE INDEX emails_org_recipient ON emails (org_id, recipient);
CREATE INDEX emails_message_id ON emails (org_id, message_id);

CREATE TABLE email_contents (
  email_id uuid PRIMARY KEY REFERENCES emails (id) ON DELETE CASCADE,
  raw bytea NOT NULL,
  text_body text,
  html_body text
);

-- Secrets the service itself needs in every process (e.g. the download-token key), made once.
CREATE TABLE service_secrets (
  name text PRIMARY KEY,
  value text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
