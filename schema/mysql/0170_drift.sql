-- What the drift check found in the config repository (docs/drift.md): one row per
-- subject–target relation whose file differs from what bindery holds — missing (a binding in
-- effect whose file is gone), changed (the file is not what bindery rendered), unknown (a file
-- under a target's path template that no binding owns). UNIQUE (target_key, subject): two
-- instances looking at once make one finding, and the same file drifting again reopens its row.
-- state: open, closed (gone by itself, or repaired), ignored (an operator's choice; settled_blob
-- is the file as it was then, '' for a missing file: any other file opens the finding again).
-- settled_op/settled_blob also keep a changed file an operator accepted as the binding's own.
CREATE TABLE IF NOT EXISTS drift_finding (
  id            BIGINT        NOT NULL AUTO_INCREMENT,
  target_key    VARCHAR(128)  NOT NULL,
  subject       VARCHAR(255)  NOT NULL,
  project       VARCHAR(255)  NOT NULL,
  path          VARCHAR(1024) NOT NULL,
  kind          VARCHAR(16)   NOT NULL,
  state         VARCHAR(16)   NOT NULL,
  operation_id  VARCHAR(64)   NULL,
  blob_id       VARCHAR(64)   NOT NULL DEFAULT '',
  commit_sha    VARCHAR(64)   NOT NULL DEFAULT '',
  author        VARCHAR(255)  NOT NULL DEFAULT '',
  committed_at  DATETIME(6)   NULL,
  settled_op    VARCHAR(64)   NULL,
  settled_blob  VARCHAR(64)   NULL,
  ignore_reason VARCHAR(512)  NOT NULL DEFAULT '',
  version       BIGINT        NOT NULL DEFAULT 1,
  first_seen    DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_seen     DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  closed_at     DATETIME(6)   NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_drift_relation (target_key, subject),
  KEY idx_drift_state_seen (state, first_seen)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- The branch head the drift check last read the files of, per project and branch: a round
-- reads a tree only when the head moved since (one branch read per project otherwise).
CREATE TABLE IF NOT EXISTS drift_head (
  project  VARCHAR(255) NOT NULL,
  branch   VARCHAR(255) NOT NULL,
  head_sha VARCHAR(64)  NOT NULL,
  read_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (project, branch)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
