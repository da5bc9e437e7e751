-- SQLite twin of mysql/0041_ticket_poll.sql (the comments there explain it).
INSERT OR IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'background', 'ticket_poll', strftime('%Y-%m-%d %H:%M:%f','now') FROM operation
  WHERE status = 'APPROVAL_SENT';
