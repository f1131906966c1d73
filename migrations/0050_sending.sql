-- Outbound mail: sent (and scheduled) emails, their content, the DKIM keys they are signed with,
-- and the addresses an organization has heard from (the first-send gate's "known" addresses).

-- A message the organization sent or scheduled. `status` is what the API shows; while a process
-- works on a row it holds `lease_token` until `lease_until` (immediate sends in the request,
-- scheduled ones in the timers), and a lease that runs out hands the row to another process.
CREATE TABLE sent_emails (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  status text NOT NULL CHECK (status IN ('scheduled', 'sent', 'failed', 'canceled')),
  -- send | reply | forward
  kind text NOT NULL DEFAULT 'send',
  source_email_id uuid,
  from_header text NOT NULL,
  from_address text NOT NULL,
  to_addresses jsonb NOT NULL DEFAULT '[]',
  cc_addresses jsonb NOT NULL DEFAULT '[]',
  bcc_addresses jsonb NOT NULL DEFAULT '[]',
  reply_to text,
  subject text NOT NULL,
  message_id text NOT NULL,
  -- Threading: set by the threads feature; in_reply_to/references as sent.
  thread_id uuid,
  in_reply_to text,
  "references" jsonb NOT NULL DEFAULT '[]',
  send_at timestamptz,
  sent_at timestamptz,
  -- When the scheduler should next try the row (send_at, or a retry after a transient failure).
  due_at timestamptz,
  attempt_count integer NOT NULL DEFAULT 0,
  lease_token text,
  lease_until timestamptz,
  -- When the message took its place in the send quota (counted per hour and per day).
  quota_at timestamptz,
  error_code text,
  error_message text,
  error_details jsonb,
  relay_response text,
  discard_content boolean NOT NULL DEFAULT false,
  content_discarded boolean NOT NULL DEFAULT false,
  attachments jsonb NOT NULL DEFAULT '[]',
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sent_emails_org_created ON sent_emails (org_id, created_at DESC, id DESC);
CREATE INDEX sent_emails_due ON sent_emails (due_at) WHERE status = 'scheduled';
CREATE INDEX sent_emails_quota ON sent_emails (org_id, quota_at) WHERE quota_at IS NOT NULL;
CREATE INDEX sent_emails_message_id ON sent_emails (org_id, message_id);

-- What a sent email says: kept until it is relayed with discard_content, else for good.
CREATE TABLE sent_email_contents (
  sent_email_id uuid PRIMARY KEY REFERENCES sent_emails (id) ON DELETE CASCADE,
  text_body text,
  html_body text,
  headers jsonb NOT NULL DEFAULT '{}',
  -- [{filename, content_type, content_base64}] (a forward's original is one of them)
  attachments jsonb NOT NULL DEFAULT '[]'
);

-- DKIM keys: one per claimed domain (domain_id set) and one service key for the managed inbox
-- domain (domain_id null). The private key is sealed under the service's master key.
CREATE TABLE dkim_keys (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  domain text NOT NULL,
  domain_id uuid REFERENCES domains (id) ON DELETE CASCADE,
  selector text NOT NULL,
  private_key text NOT NULL,
  public_key text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX dkim_keys_domain_id ON dkim_keys (domain_id) WHERE domain_id IS NOT NULL;
CREATE UNIQUE INDEX dkim_keys_service_domain ON dkim_keys (domain) WHERE domain_id IS NULL;

-- Addresses that sent the organization accepted mail.
CREATE TABLE known_addresses (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  address text NOT NULL,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, address)
);
INSERT INTO known_addresses (org_id, address, first_seen_at)
  SELECT org_id, lower(from_address), min(received_at) FROM emails
   WHERE status = 'accepted' AND from_address IS NOT NULL
   GROUP BY org_id, lower(from_address)
  ON CONFLICT DO NOTHING;
