-- Telling people (docs/notifications.md).
--
-- notify_event is the outbox: one row per piece of news, written in the transaction of the change
-- it reports (a binding transition, a batch's write, a refused callback), so a change rolled back
-- has no event and a change committed never loses one. event_id is its stable id: the
-- webhook-id of every delivery of it, the email's Message-ID. dedupe_key, when set, makes news
-- that several instances may find at once (an overdue deploy, a refused configuration) one row.
-- data holds the facts as they were at the change (JSON), rendered into words at delivery.
CREATE TABLE IF NOT EXISTS notify_event (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  event_id     VARCHAR(40)  NOT NULL,
  type         VARCHAR(40)  NOT NULL,
  operation_id VARCHAR(64)  NULL,
  subject_id   VARCHAR(254) NULL,
  batch_id     BIGINT       NULL,
  dedupe_key   VARCHAR(191) NULL,
  data         MEDIUMTEXT   NOT NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_notify_event (event_id),
  UNIQUE KEY uk_notify_event_dedupe (dedupe_key),
  KEY idx_notify_event_operation (operation_id, id),
  KEY idx_notify_event_batch (batch_id, type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- notify_delivery is one event for one receiver: a webhook endpoint, a requester's mailbox, a
-- chat, a batch's merge request. endpoint names the receiver whose health is tracked
-- (notify_endpoint); target is where it went (an address, a merge request). Its task (kind
-- notify, ref delivery:<id>) carries the retry schedule; status says how it ended.
CREATE TABLE IF NOT EXISTS notify_delivery (
  id           BIGINT        NOT NULL AUTO_INCREMENT,
  event_id     VARCHAR(40)   NOT NULL,
  channel      VARCHAR(16)   NOT NULL,
  endpoint     VARCHAR(191)  NOT NULL,
  target       VARCHAR(254)  NOT NULL DEFAULT '',
  status       VARCHAR(16)   NOT NULL,
  attempts     INT           NOT NULL DEFAULT 0,
  last_code    INT           NOT NULL DEFAULT 0,
  last_error   VARCHAR(512)  NOT NULL DEFAULT '',
  next_at      DATETIME(6)   NULL,
  created_at   DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at   DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  done_at      DATETIME(6)   NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_notify_delivery (event_id, channel, endpoint, target),
  KEY idx_notify_delivery_endpoint (endpoint, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- notify_attempt is every attempt of a delivery: its answer, how long it took, the class of its
-- failure. Kept notify.keepAttempts, then purged.
CREATE TABLE IF NOT EXISTS notify_attempt (
  id           BIGINT        NOT NULL AUTO_INCREMENT,
  delivery_id  BIGINT        NOT NULL,
  at           DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  code         INT           NOT NULL DEFAULT 0,
  latency_ms   INT           NOT NULL DEFAULT 0,
  class        VARCHAR(32)   NOT NULL,
  error        VARCHAR(512)  NOT NULL DEFAULT '',
  instance     VARCHAR(64)   NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  KEY idx_notify_attempt_delivery (delivery_id, id),
  KEY idx_notify_attempt_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- notify_endpoint is a receiver's health, shared by every instance: failing since when (the
-- first failure after the last success), its last success, and when and why it was disabled.
CREATE TABLE IF NOT EXISTS notify_endpoint (
  endpoint        VARCHAR(191) NOT NULL,
  failing_since   DATETIME(6)  NULL,
  last_success    DATETIME(6)  NULL,
  disabled_at     DATETIME(6)  NULL,
  disabled_reason VARCHAR(512) NOT NULL DEFAULT '',
  updated_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (endpoint)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- notify_pref is which events email a person (absent: the defaults).
CREATE TABLE IF NOT EXISTS notify_pref (
  subject_id  VARCHAR(254) NOT NULL,
  events      VARCHAR(1024) NOT NULL,
  updated_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (subject_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- notify_mr_note is the note bindery wrote on a batch's merge request, so that a bisection's
-- result edits that note instead of writing another.
CREATE TABLE IF NOT EXISTS notify_mr_note (
  project     VARCHAR(255)  NOT NULL,
  mr_iid      BIGINT        NOT NULL,
  note_id     BIGINT        NOT NULL,
  body        TEXT          NOT NULL,
  updated_at  DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (project, mr_iid)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
