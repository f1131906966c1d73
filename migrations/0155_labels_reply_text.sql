-- Labels and read state of received mail; the reply text (new text without quoted history or
-- signature) of received and sent mail, which search ranks on.

ALTER TABLE emails ADD COLUMN labels jsonb NOT NULL DEFAULT '[]';
ALTER TABLE emails ADD COLUMN read boolean NOT NULL DEFAULT false;
CREATE INDEX emails_labels ON emails USING gin (labels jsonb_path_ops);
CREATE INDEX emails_org_unread ON emails (org_id, received_at DESC) WHERE NOT read;

-- Computed by the service (an npm parser, not SQL) when the message is stored; it lives with the
-- content, so discarding the content discards it too. Mail stored before this migration has none:
-- the API computes it when it shows such a message.
ALTER TABLE email_contents ADD COLUMN extracted_text text;
ALTER TABLE sent_email_contents ADD COLUMN extracted_text text;

-- Search: the reply text is indexed between the subject and the whole body, so a message whose
-- own words match ranks above one that only quotes them.
ALTER TABLE search_documents ADD COLUMN extracted text;
ALTER TABLE search_documents DROP COLUMN tsv;
ALTER TABLE search_documents ADD COLUMN tsv tsvector GENERATED ALWAYS AS (
  setweight(to_tsvector('english', coalesce(subject, '')), 'A') ||
  setweight(to_tsvector('english', coalesce(extracted, '')), 'B') ||
  setweight(to_tsvector('english', coalesce(from_name, '') || ' ' || coalesce(from_address, '')), 'B') ||
  setweight(to_tsvector('english', coalesce(body, '')), 'C')
) STORED;
CREATE INDEX search_documents_tsv ON search_documents USING gin (tsv);

-- Discarded content takes the reply text out of the index with the body.
CREATE OR REPLACE FUNCTION search_documents_discard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.content_discarded_at IS NOT NULL AND OLD.content_discarded_at IS NULL THEN
    UPDATE search_documents SET body = NULL, extracted = NULL, embedded_at = NULL, embed_next_at = now(), embed_attempts = 0
     WHERE id = NEW.id;
    DELETE FROM search_embeddings WHERE id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;

-- Sent mail: as migrations/0062, plus the reply text stored with its content.
CREATE OR REPLACE FUNCTION search_documents_sent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'sent' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'sent') THEN
    INSERT INTO search_documents (id, org_id, kind, sent_email_id, at, from_address, from_name, recipients, subject, body, extracted)
    SELECT NEW.id, NEW.org_id, 'sent', NEW.id, coalesce(NEW.sent_at, now()), lower(NEW.from_address), NULL,
           (SELECT coalesce(jsonb_agg(DISTINCT lower(coalesce(substring(a FROM '<([^<>]+)>\s*$'), a))), '[]')
              FROM jsonb_array_elements_text(NEW.to_addresses || NEW.cc_addresses || NEW.bcc_addresses) a),
           NEW.subject,
           CASE WHEN NEW.content_discarded THEN NULL
                ELSE left(coalesce(nullif(c.text_body, ''), regexp_replace(c.html_body, '<[^>]*>', ' ', 'g')), 100000) END,
           CASE WHEN NEW.content_discarded THEN NULL ELSE left(c.extracted_text, 100000) END
      FROM (SELECT 1) one LEFT JOIN sent_email_contents c ON c.sent_email_id = NEW.id
    ON CONFLICT (id) DO NOTHING;
  ELSIF NEW.content_discarded AND TG_OP = 'UPDATE' AND NOT OLD.content_discarded THEN
    UPDATE search_documents SET body = NULL, extracted = NULL, embedded_at = NULL, embed_next_at = now(), embed_attempts = 0
     WHERE id = NEW.id;
    DELETE FROM search_embeddings WHERE id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
