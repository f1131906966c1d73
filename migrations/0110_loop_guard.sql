-- Loop guard. Received mail marked automatic (Auto-Submitted other than "no", or Precedence
-- bulk|junk|list) is `auto_submitted`; sent mail an automation sent (a function's MAILROOM binding)
-- is `automated` and counts on the per-thread budgets.
ALTER TABLE emails ADD COLUMN auto_submitted boolean NOT NULL DEFAULT false;
UPDATE emails SET auto_submitted = true
WHERE lower(btrim(split_part(split_part(coalesce(headers ->> 'auto-submitted', ''), E'\n', 1), ';', 1))) NOT IN ('', 'no')
   OR lower(btrim(split_part(coalesce(headers ->> 'precedence', ''), E'\n', 1))) IN ('bulk', 'junk', 'list');

ALTER TABLE sent_emails ADD COLUMN automated boolean NOT NULL DEFAULT false;
CREATE INDEX sent_emails_automated_thread ON sent_emails (thread_id, created_at) WHERE automated;
-- "A message from a person in between": the thread's latest mail not marked automatic.
CREATE INDEX emails_thread_person ON emails (thread_id, received_at) WHERE NOT auto_submitted;
