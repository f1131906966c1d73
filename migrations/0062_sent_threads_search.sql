-- Sent mail in threads and search.
--
-- Threads: sent emails carry a thread id like received ones (the sending code asks
-- src/threads/Threading.ts when it records one). Sent mail already stored is threaded here, across
-- both tables: a sent reply joins its original's thread, a received reply to sent mail joins the
-- sent mail's; merged threads keep the oldest (smallest) id.

UPDATE sent_emails SET thread_id = uuid7_at(created_at) WHERE thread_id IS NULL;

CREATE TEMP TABLE thread_nodes ON COMMIT DROP AS
  SELECT id, org_id, thread_id, message_id, in_reply_to, "references" FROM emails
  UNION ALL SELECT id, org_id, thread_id, message_id, in_reply_to, "references" FROM sent_emails;
CREATE INDEX ON thread_nodes (id);

CREATE TEMP TABLE thread_node_keys ON COMMIT DROP AS
  SELECT id, org_id, message_id AS key FROM thread_nodes WHERE message_id IS NOT NULL
  UNION SELECT id, org_id, in_reply_to FROM thread_nodes WHERE in_reply_to IS NOT NULL
  UNION SELECT n.id, n.org_id, r.key FROM thread_nodes n, jsonb_array_elements_text(n."references") AS r(key);

CREATE TEMP TABLE thread_node_edges ON COMMIT DROP AS
  SELECT DISTINCT k.id AS a, n.id AS b FROM thread_node_keys k
    JOIN thread_nodes n ON n.org_id = k.org_id AND n.message_id = k.key AND n.id <> k.id;
INSERT INTO thread_node_edges SELECT b, a FROM thread_node_edges;
CREATE INDEX ON thread_node_edges (a);

DO $$
BEGIN
  LOOP
    UPDATE thread_nodes t SET thread_id = m.t
      FROM (SELECT x.a AS id, min(y.thread_id::text)::uuid AS t
              FROM thread_node_edges x JOIN thread_nodes y ON y.id = x.b GROUP BY x.a) m
     WHERE t.id = m.id AND m.t::text < t.thread_id::text;
    EXIT WHEN NOT FOUND;
  END LOOP;
END
$$;

UPDATE emails e SET thread_id = n.thread_id FROM thread_nodes n WHERE n.id = e.id AND n.thread_id <> e.thread_id;
UPDATE sent_emails s SET thread_id = n.thread_id FROM thread_nodes n WHERE n.id = s.id AND n.thread_id <> s.thread_id;

ALTER TABLE sent_emails ALTER COLUMN thread_id SET NOT NULL;
ALTER TABLE sent_emails ALTER COLUMN thread_id SET DEFAULT uuid7_at(now());
CREATE INDEX sent_emails_org_thread ON sent_emails (org_id, thread_id);
CREATE INDEX sent_emails_org_in_reply_to ON sent_emails (org_id, in_reply_to) WHERE in_reply_to IS NOT NULL;
CREATE INDEX sent_emails_references ON sent_emails USING gin ("references" jsonb_path_ops);

-- Search: a sent email becomes searchable when it is sent (not while scheduled, nor when it failed).
ALTER TABLE search_documents ADD COLUMN sent_email_id uuid REFERENCES sent_emails (id) ON DELETE CASCADE;
CREATE INDEX search_documents_sent_email ON search_documents (sent_email_id);

CREATE FUNCTION search_documents_sent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'sent' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'sent') THEN
    INSERT INTO search_documents (id, org_id, kind, sent_email_id, at, from_address, from_name, recipients, subject, body)
    SELECT NEW.id, NEW.org_id, 'sent', NEW.id, coalesce(NEW.sent_at, now()), lower(NEW.from_address), NULL,
           (SELECT coalesce(jsonb_agg(DISTINCT lower(coalesce(substring(a FROM '<([^<>]+)>\s*$'), a))), '[]')
              FROM jsonb_array_elements_text(NEW.to_addresses || NEW.cc_addresses || NEW.bcc_addresses) a),
           NEW.subject,
           CASE WHEN NEW.content_discarded THEN NULL
                ELSE left(coalesce(nullif(c.text_body, ''), regexp_replace(c.html_body, '<[^>]*>', ' ', 'g')), 100000) END
      FROM (SELECT 1) one LEFT JOIN sent_email_contents c ON c.sent_email_id = NEW.id
    ON CONFLICT (id) DO NOTHING;
  ELSIF NEW.content_discarded AND TG_OP = 'UPDATE' AND NOT OLD.content_discarded THEN
    UPDATE search_documents SET body = NULL, embedded_at = NULL, embed_next_at = now(), embed_attempts = 0
     WHERE id = NEW.id;
    DELETE FROM search_embeddings WHERE id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER search_documents_sent AFTER INSERT OR UPDATE OF status, content_discarded ON sent_emails
  FOR EACH ROW EXECUTE FUNCTION search_documents_sent();

INSERT INTO search_documents (id, org_id, kind, sent_email_id, at, from_address, recipients, subject, body)
SELECT s.id, s.org_id, 'sent', s.id, coalesce(s.sent_at, s.created_at), lower(s.from_address),
       (SELECT coalesce(jsonb_agg(DISTINCT lower(coalesce(substring(a FROM '<([^<>]+)>\s*$'), a))), '[]')
          FROM jsonb_array_elements_text(s.to_addresses || s.cc_addresses || s.bcc_addresses) a),
       s.subject,
       CASE WHEN s.content_discarded THEN NULL
            ELSE left(coalesce(nullif(c.text_body, ''), regexp_replace(c.html_body, '<[^>]*>', ' ', 'g')), 100000) END
  FROM sent_emails s LEFT JOIN sent_email_contents c ON c.sent_email_id = s.id
 WHERE s.status = 'sent';
