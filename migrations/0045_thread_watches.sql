-- Thread watches ("wake me if no reply"): a wake that fires once `within` after its creation unless
-- an inbound message joins the thread first. It is a wake row with the thread it watches; a merge of
-- threads moves the watch with its thread (src/threads/Threading.ts), and why a watch was canceled is
-- kept: 'replied' (mail joined the thread), 'thread_deleted' (its last message was deleted) or
-- 'canceled' (DELETE /wakes/{id}).
ALTER TABLE wakes ADD COLUMN watch_thread_id uuid;
ALTER TABLE wakes ADD COLUMN watch_within text;
ALTER TABLE wakes ADD COLUMN cancel_reason text CHECK (cancel_reason IN ('canceled', 'replied', 'thread_deleted'));
CREATE INDEX wakes_watch_thread ON wakes (org_id, watch_thread_id) WHERE watch_thread_id IS NOT NULL;
