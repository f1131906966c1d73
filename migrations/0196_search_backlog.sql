-- The embedding backlog in a narrow table of its own, so that a search document is written once.
--
-- The backlog's state lived in search_documents (embedded_at, embed_next_at, embed_attempts,
-- embed_lease_until, embed_error). Its completion changed embedded_at, the predicate of the backlog
-- index, so PostgreSQL wrote a new version of the whole row and inserted all of the body's lexemes
-- again into the full-text and trigram GIN indexes: 0.39 ms of the database's CPU per message for a
-- 10 KB body, a tenth of the database's work per accepted email. Here a pending document is a row of
-- search_backlog; claiming it updates that row, finishing it deletes it, and search_documents is
-- only read.
CREATE TABLE search_backlog (
  id uuid PRIMARY KEY REFERENCES search_documents (id) ON DELETE CASCADE,
  -- Not claimed before this time (a failing batch is tried again later and later).
  next_at timestamptz NOT NULL DEFAULT now(),
  attempts integer NOT NULL DEFAULT 0,
  -- A process holds it until then; one that dies leaves it to expire.
  lease_until timestamptz,
  -- Why the last try failed, for an operator reading the table.
  error text
) WITH (fillfactor = 70);
CREATE INDEX search_backlog_next ON search_backlog (next_at);

INSERT INTO search_backlog (id, next_at, attempts, lease_until, error)
SELECT id, embed_next_at, embed_attempts, embed_lease_until, embed_error
  FROM search_documents WHERE embedded_at IS NULL;

-- Discarded content leaves the index and the vector; the subject and addresses are embedded again.
-- A batch embedding the document meanwhile loses its lease, so it does not store its vector.
CREATE FUNCTION search_document_without_content(doc uuid) RETURNS void LANGUAGE sql AS $$
  UPDATE search_documents SET body = NULL, extracted = NULL WHERE id = doc;
  DELETE FROM search_embeddings WHERE id = doc;
  INSERT INTO search_backlog (id) SELECT id FROM search_documents WHERE id = doc
  ON CONFLICT (id) DO UPDATE SET next_at = now(), attempts = 0, lease_until = NULL, error = NULL;
$$;

CREATE OR REPLACE FUNCTION search_documents_discard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.content_discarded_at IS NOT NULL AND OLD.content_discarded_at IS NULL THEN
    PERFORM search_document_without_content(NEW.id);
  END IF;
  RETURN NULL;
END
$$;

-- Sent mail becomes searchable when it is sent (and pending in the backlog with it).
CREATE OR REPLACE FUNCTION search_documents_sent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'sent' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'sent') THEN
    WITH doc AS (
      INSERT INTO search_documents (id, org_id, kind, sent_email_id, at, from_address, from_name, recipients, subject, body, extracted)
      SELECT NEW.id, NEW.org_id, 'sent', NEW.id, coalesce(NEW.sent_at, now()), lower(NEW.from_address), NULL,
             (SELECT coalesce(jsonb_agg(DISTINCT lower(coalesce(substring(a FROM '<([^<>]+)>\s*$'), a))), '[]')
                FROM jsonb_array_elements_text(NEW.to_addresses || NEW.cc_addresses || NEW.bcc_addresses) a),
             NEW.subject,
             CASE WHEN NEW.content_discarded THEN NULL
                  ELSE left(coalesce(nullif(c.text_body, ''), regexp_replace(c.html_body, '<[^>]*>', ' ', 'g')), 100000) END,
             CASE WHEN NEW.content_discarded THEN NULL ELSE left(c.extracted_text, 100000) END
        FROM (SELECT 1) one LEFT JOIN sent_email_contents c ON c.sent_email_id = NEW.id
      ON CONFLICT (id) DO NOTHING
      RETURNING id)
    INSERT INTO search_backlog (id) SELECT id FROM doc;
  ELSIF NEW.content_discarded AND TG_OP = 'UPDATE' AND NOT OLD.content_discarded THEN
    PERFORM search_document_without_content(NEW.id);
  END IF;
  RETURN NULL;
END
$$;

DROP INDEX search_documents_backlog;
ALTER TABLE search_documents
  DROP COLUMN embedded_at,
  DROP COLUMN embed_next_at,
  DROP COLUMN embed_attempts,
  DROP COLUMN embed_lease_until,
  DROP COLUMN embed_error;

-- Nothing updates a search document in the normal course any more (only discarding its content
-- does), so its pages need no room kept free (migration 0195): they are filled again.
ALTER TABLE search_documents RESET (fillfactor);
