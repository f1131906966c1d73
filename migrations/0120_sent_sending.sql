-- An immediate send is `sending` while it is relayed (within the request, or by the timers after the
-- process that took it died), never `scheduled`: only a send with a `send_at` is scheduled.
ALTER TABLE sent_emails DROP CONSTRAINT IF EXISTS sent_emails_status_check;
ALTER TABLE sent_emails ADD CONSTRAINT sent_emails_status_check
  CHECK (status IN ('scheduled', 'sending', 'sent', 'failed', 'canceled'));
UPDATE sent_emails SET status = 'sending' WHERE status = 'scheduled' AND send_at IS NULL;
DROP INDEX IF EXISTS sent_emails_due;
CREATE INDEX sent_emails_due ON sent_emails (due_at) WHERE status IN ('scheduled', 'sending');
