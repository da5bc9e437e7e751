-- Audit log of operator and owner actions (docs/api.md, 'Who may call'): who, what, redacted and
-- truncated parameters, when. event_key is unique: recording the same event twice is "already
-- recorded", never an overwrite.
CREATE TABLE IF NOT EXISTS audit_log (
  id         INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  event_key  TEXT     NOT NULL,
  at         DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  actor      TEXT     NOT NULL,
  action     TEXT     NOT NULL,
  params     TEXT     NOT NULL,
  request_id TEXT     NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uq_audit_event ON audit_log (event_key);
