-- An organization's send usage, counted under its quota lock, in one call: the lock (the same key
-- the send path always took, so older processes still serialize with newer ones) and then the
-- count. The function is VOLATILE, so its count takes a snapshot of its own after the lock is
-- granted: it sees every send committed by whoever held the lock before, even when the calling
-- statement started before the lock was granted. That lets one autocommit statement lock, count
-- and insert a send (SendingRepo.recordCounted) instead of BEGIN, lock, insert, COMMIT; the lock is
-- held until that statement's transaction ends.
CREATE FUNCTION send_usage_locked(p_org uuid, p_at timestamptz)
RETURNS TABLE (hour integer, day integer, oldest_hour timestamptz, oldest_day timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('send-quota:' || p_org::text));
  RETURN QUERY
    SELECT count(*) FILTER (WHERE s.quota_at > p_at - interval '1 hour')::integer,
           count(*)::integer,
           min(s.quota_at) FILTER (WHERE s.quota_at > p_at - interval '1 hour'),
           min(s.quota_at)
      FROM sent_emails s WHERE s.org_id = p_org AND s.quota_at > p_at - interval '24 hours';
END
$$;
