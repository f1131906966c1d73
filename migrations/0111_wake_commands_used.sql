-- Signed wake commands are single-use: the (wake id, firing) of each one stored, whether the service
-- fired it or it came over SMTP. A signature is accepted for 24 hours, so older rows can go.
CREATE TABLE wake_commands_used (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  use_key text NOT NULL,
  used_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, use_key)
);
CREATE INDEX wake_commands_used_at ON wake_commands_used (used_at);
