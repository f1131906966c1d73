-- Outbound outcomes: what happened to a sent email after the relay took it (a DSN or an ARF
-- complaint received at its VERP return path), and the addresses an organization no longer mails.

ALTER TABLE sent_emails DROP CONSTRAINT IF EXISTS sent_emails_status_check;
ALTER TABLE sent_emails ADD CONSTRAINT sent_emails_status_check
  CHECK (status IN ('scheduled', 'sending', 'sent', 'failed', 'canceled', 'bounced', 'complained'));
-- {status, diagnostic, received_at, recipient, type}: the latest bounce or complaint (null before one).
ALTER TABLE sent_emails ADD COLUMN IF NOT EXISTS bounce jsonb;

-- Addresses that hard-bounced or complained: sends to them are refused (422 recipient_suppressed)
-- until the organization deletes the entry.
CREATE TABLE IF NOT EXISTS suppressions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  address text NOT NULL,
  -- hard_bounce | complaint
  reason text NOT NULL,
  sent_email_id uuid,
  status text,
  diagnostic text,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);
CREATE UNIQUE INDEX IF NOT EXISTS suppressions_org_address ON suppressions (org_id, address);
CREATE INDEX IF NOT EXISTS suppressions_org_created ON suppressions (org_id, created_at DESC, id DESC);
