-- A request waiting for its approval decision (APPROVAL_SENT) now has a task: bindery reads its
-- ticket every approval.pollAfter, so a decision whose callback was lost is not. Requests already
-- waiting get theirs, due now: the first look re-opens the ticket (idempotent by operationId) to
-- learn its id, then reads it.
INSERT IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'background', 'ticket_poll', CURRENT_TIMESTAMP(6) FROM operation
  WHERE status = 'APPROVAL_SENT';
