-- Trust annotation, quarantine and the attachment policy.
-- trust: {sender_authenticated, sender_known, registry_verified, auto_submitted, signals[]} as stored
-- when the mail arrived (null for mail stored before this migration: shown as nothing known).
ALTER TABLE emails ADD COLUMN IF NOT EXISTS trust jsonb;
-- Quarantined mail is stored, not delivered, until released or 30 days have passed.
ALTER TABLE emails ADD COLUMN IF NOT EXISTS quarantine_expires_at timestamptz;
ALTER TABLE emails DROP CONSTRAINT IF EXISTS emails_status_check;
ALTER TABLE emails ADD CONSTRAINT emails_status_check CHECK (status IN ('accepted', 'rejected', 'quarantined'));
CREATE INDEX IF NOT EXISTS emails_quarantine_expiry ON emails (quarantine_expires_at) WHERE status = 'quarantined';

-- Quarantine filters: signals (any of) and an optional sender pattern (stored as '' when absent).
ALTER TABLE filters ADD COLUMN IF NOT EXISTS signals jsonb;
ALTER TABLE filters DROP CONSTRAINT IF EXISTS filters_pattern_check;
ALTER TABLE filters ADD CONSTRAINT filters_pattern_check CHECK (pattern = lower(pattern) AND length(pattern) <= 500
  AND (length(pattern) >= 1 OR type = 'quarantine'));
ALTER TABLE filters DROP CONSTRAINT IF EXISTS filters_type_check;
ALTER TABLE filters ADD CONSTRAINT filters_type_check CHECK (type IN ('whitelist', 'blocklist', 'registry', 'quarantine'));
DROP INDEX IF EXISTS filters_unique;
CREATE UNIQUE INDEX filters_unique ON filters (org_id, type, pattern, coalesce(domain_id, '00000000-0000-0000-0000-000000000000'::uuid), coalesce(signals::text, ''));

-- {max_bytes, max_count, allowed_types, blocked_types, action}; null: no policy.
ALTER TABLE organizations ADD COLUMN IF NOT EXISTS attachment_policy jsonb;
