-- Conversation threads. A thread is the set of messages of one organization linked by Message-ID,
-- In-Reply-To and References (src/threads/Threading.ts); it is nothing but the `thread_id` its
-- messages share, so a merge is one UPDATE of the younger thread's messages.
--
-- Thread ids are time-ordered UUIDs (version 7 layout: the first 48 bits are the Unix time in
-- milliseconds when the thread began), so "the older thread" of a merge is the smaller id.

CREATE FUNCTION uuid7_at(at timestamptz) RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' ||
          substr(md5(random()::text), 1, 3) || to_hex(8 + floor(random() * 4)::int) ||
          substr(md5(random()::text), 1, 15))::uuid
$$;

ALTER TABLE emails ADD COLUMN thread_id uuid;

-- Thread the mail already stored: every message starts alone, then thread ids flow along every
-- link (a message naming another by Message-ID, or two copies of one message) until nothing
-- changes; each connected set ends with the smallest, i.e. oldest, id among its members.
UPDATE emails SET thread_id = uuid7_at(received_at);

CREATE TEMP TABLE thread_keys ON COMMIT DROP AS
  SELECT id, org_id, message_id AS key FROM emails WHERE message_id IS NOT NULL
  UNION SELECT id, org_id, in_reply_to FROM emails WHERE in_reply_to IS NOT NULL
  UNION SELECT e.id, e.org_id, r.key FROM emails e, jsonb_array_elements_text(e."references") AS r(key);

CREATE TEMP TABLE thread_edges ON COMMIT DROP AS
  SELECT DISTINCT k.id AS a, e.id AS b FROM thread_keys k
    JOIN emails e ON e.org_id = k.org_id AND e.message_id = k.key AND e.id <> k.id;
INSERT INTO thread_edges SELECT b, a FROM thread_edges;
CREATE INDEX ON thread_edges (a);

DO $$
BEGIN
  LOOP
    UPDATE emails e SET thread_id = m.t
      FROM (SELECT x.a AS id, min(y.thread_id::text)::uuid AS t
              FROM thread_edges x JOIN emails y ON y.id = x.b GROUP BY x.a) m
     WHERE e.id = m.id AND m.t::text < e.thread_id::text;
    EXIT WHEN NOT FOUND;
  END LOOP;
END
$$;

ALTER TABLE emails ALTER COLUMN thread_id SET NOT NULL;
-- Rows written without one (tools, fixtures) still start a thread of their own.
ALTER TABLE emails ALTER COLUMN thread_id SET DEFAULT uuid7_at(now());

CREATE INDEX emails_org_thread ON emails (org_id, thread_id);
-- "Which stored message names this one": the reverse lookups of threading.
CREATE INDEX emails_org_in_reply_to ON emails (org_id, in_reply_to) WHERE in_reply_to IS NOT NULL;
CREATE INDEX emails_references ON emails USING gin ("references" jsonb_path_ops);
