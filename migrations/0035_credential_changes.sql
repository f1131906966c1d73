-- Every change that can end or narrow a credential is announced on the channel
-- `mailroom_credentials`, so each service process drops the principal it holds in its short-lived
-- credential cache at once instead of serving it until the entry expires. The payload names what
-- changed: `api_key:<id>`, `oauth:<grant id>` or `member:<org id>:<user id>`.
CREATE FUNCTION mailroom_notify_credential_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
  IF TG_TABLE_NAME = 'api_keys' THEN
    PERFORM pg_notify('mailroom_credentials', 'api_key:' || OLD.id::text);
  ELSIF TG_TABLE_NAME = 'oauth_grants' THEN
    PERFORM pg_notify('mailroom_credentials', 'oauth:' || OLD.id::text);
  ELSE
    PERFORM pg_notify('mailroom_credentials', 'member:' || OLD.org_id::text || ':' || OLD.user_id::text);
  END IF;
  RETURN r;
END $$;

CREATE TRIGGER api_keys_credential_change
  AFTER UPDATE OF revoked_at, key_hash, org_id OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION mailroom_notify_credential_change();

CREATE TRIGGER oauth_grants_credential_change
  AFTER UPDATE OF revoked_at, access_token_hash, access_expires_at, org_id, user_id OR DELETE ON oauth_grants
  FOR EACH ROW EXECUTE FUNCTION mailroom_notify_credential_change();

CREATE TRIGGER memberships_credential_change
  AFTER UPDATE OF role, org_id, user_id OR DELETE ON memberships
  FOR EACH ROW EXECUTE FUNCTION mailroom_notify_credential_change();
