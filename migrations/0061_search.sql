-- Search over received and sent mail: one document per message, written with the message.
--
-- Lexical: a STORED generated tsvector (generated columns are VIRTUAL by default on recent
-- PostgreSQL, so say it) weighted subject A, sender B, body C, and a short lowercased
-- subject + sender column with a trigram index for misspelled words.
-- Semantic: the documents whose embedding is missing form the backlog (leased like deliveries);
-- vectors are float32 `bytea` with their model, ranked exactly in the service (no pgvector needed).

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE search_documents (
  -- The message's own id (an email's, or a sent email's).
  id uuid PRIMARY KEY,
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('received', 'sent')),
  email_id uuid REFERENCES emails (id) ON DELETE CASCADE,
  at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  from_address text,
  from_name text,
  -- Every recipient address (To, Cc and, for received mail, the address it was received at), lowercased.
  recipients jsonb NOT NULL DEFAULT '[]',
  subject text,
  -- The text body (or the text of the HTML body), cut to 100,000 characters: a tsvector is capped at 1 MB.
  body text,
  tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', coalesce(subject, '')), 'A') ||
    setweight(to_tsvector('english', coalesce(from_name, '') || ' ' || coalesce(from_address, '')), 'B') ||
    setweight(to_tsvector('english', coalesce(body, '')), 'C')
  ) STORED,
  names text GENERATED ALWAYS AS (
    lower(coalesce(subject, '') || ' ' || coalesce(from_name, '') || ' ' || coalesce(from_address, ''))
  ) STORED,
  -- The embedding backlog: pending while embedded_at is null, leased by one worker at a time.
  embedded_at timestamptz,
  embed_next_at timestamptz NOT NULL DEFAULT now(),
  embed_attempts integer NOT NULL DEFAULT 0,
  embed_lease_until timestamptz,
  embed_error text
);
CREATE INDEX search_documents_tsv ON search_documents USING gin (tsv);
CREATE INDEX search_documents_names ON search_documents USING gin (names gin_trgm_ops);
CREATE INDEX search_documents_org_at ON search_documents (org_id, at DESC);
CREATE INDEX search_documents_backlog ON search_documents (embed_next_at) WHERE embedded_at IS NULL;
CREATE INDEX search_documents_email ON search_documents (email_id);

CREATE TABLE search_embeddings (
  id uuid PRIMARY KEY REFERENCES search_documents (id) ON DELETE CASCADE,
  org_id uuid NOT NULL,
  model text NOT NULL,
  dims integer NOT NULL,
  -- float32 little-endian, L2-normalised.
  vector bytea NOT NULL,
  -- Processes keep the organization's vectors in memory and read only what is newer than they hold.
  seq bigserial NOT NULL
);
CREATE INDEX search_embeddings_org_seq ON search_embeddings (org_id, model, seq);

-- Mail already stored (accepted only: spam-rejected mail is not searchable).
INSERT INTO search_documents (id, org_id, kind, email_id, at, from_address, from_name, recipients, subject, body)
SELECT e.id, e.org_id, 'received', e.id, e.received_at, lower(e.from_address), e.from_name,
       (SELECT coalesce(jsonb_agg(DISTINCT lower(a)), '[]') FROM jsonb_array_elements_text(e.to_addresses || e.cc_addresses || jsonb_build_array(e.recipient)) a),
       e.subject, CASE WHEN e.content_discarded_at IS NULL THEN left(c.text_body, 100000) END
  FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id
 WHERE e.status = 'accepted';

-- Discarded content leaves the index too (the subject and addresses stay, as on the email).
CREATE FUNCTION search_documents_discard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.content_discarded_at IS NOT NULL AND OLD.content_discarded_at IS NULL THEN
    UPDATE search_documents SET body = NULL, embedded_at = NULL, embed_next_at = now(), embed_attempts = 0
     WHERE id = NEW.id;
    DELETE FROM search_embeddings WHERE id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER search_documents_discard AFTER UPDATE OF content_discarded_at ON emails
  FOR EACH ROW EXECUTE FUNCTION search_documents_discard();
