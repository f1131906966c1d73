-- Verification codes and user codes are now stored as HMAC-SHA256 under a service key: hashes
-- written before cannot match any more, and these codes live 15 minutes at most, so the pending
-- ones are voided (the person asks for a new code; a CLI login starts again).
UPDATE signup_sessions SET voided_at = now() WHERE completed_at IS NULL AND voided_at IS NULL;
UPDATE claim_sessions SET voided_at = now() WHERE completed_at IS NULL AND voided_at IS NULL;
UPDATE device_web_sessions SET code_hash = NULL, code_expires_at = now() WHERE code_hash IS NOT NULL;
UPDATE device_logins SET expires_at = now() WHERE status = 'pending' AND expires_at > now();

-- A /device session signs a person in for one CLI login (the user code it was opened with) only.
ALTER TABLE device_web_sessions ADD COLUMN login_id uuid REFERENCES device_logins (id) ON DELETE SET NULL;

-- Wrong codes per email across every code and flow: the lockout counts them over a day.
CREATE TABLE verification_failures (
  email text NOT NULL,
  failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX verification_failures_email ON verification_failures (email, failed_at);
