-- The email rail of payments: challenges mailed to an address (the sent email and its Message-ID,
-- which replies name in In-Reply-To/References), and the durable queue of received mail carrying a
-- signed payment. A job row is written in the same statement that stores the email, so a payment
-- reply accepted over SMTP is never lost; workers in every process claim jobs with a lease.

ALTER TABLE payment_challenges ADD COLUMN deliver_to text;
ALTER TABLE payment_challenges ADD COLUMN sent_email_id uuid;
ALTER TABLE payment_challenges ADD COLUMN message_id text;
CREATE INDEX payment_challenges_message ON payment_challenges (org_id, message_id) WHERE message_id IS NOT NULL;

CREATE TABLE payment_email_jobs (
  email_id uuid PRIMARY KEY REFERENCES emails (id) ON DELETE CASCADE,
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done')),
  attempts integer NOT NULL DEFAULT 0,
  due_at timestamptz NOT NULL DEFAULT now(),
  lease_token text,
  lease_until timestamptz,
  challenge_id uuid,
  payment_id uuid,
  -- settled | failed | conflict | unmatched | ignored: what the payee's service answered.
  outcome text,
  -- The answer mailed to the payer (the x402 SettleResponse plus our fields), once decided.
  answer jsonb,
  reply_email_id uuid,
  last_error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_email_jobs_due ON payment_email_jobs (due_at) WHERE status = 'pending';
