-- Signing people in (docs/api.md, 'Who may call').
--
-- signin_attempt is one sign-in on its way through the identity provider: started by GET
-- /auth/login, taken (deleted) by the one callback that finishes it, so a state cannot be used
-- twice. It is keyed by the SHA-256 of the state, which only the browser's cookie and the
-- provider's redirect carry. nonce and verifier (PKCE) live ten minutes at most; next_path is
-- the page of bindery to return to, redirect_url the callback address the provider was given
-- (the code exchange must repeat it exactly).
CREATE TABLE IF NOT EXISTS signin_attempt (
  state_hash   CHAR(64)      NOT NULL,
  nonce        VARCHAR(64)   NOT NULL,
  verifier     VARCHAR(128)  NOT NULL,
  next_path    VARCHAR(2048) NOT NULL,
  redirect_url VARCHAR(2048) NOT NULL,
  created_at   DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  expires_at   DATETIME(6)   NOT NULL,
  PRIMARY KEY (state_hash),
  KEY idx_signin_attempt_expires (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- signin_session is one signed-in browser: the cookie bindery_session carries a random id, the
-- row only its SHA-256, so a copy of the database holds no cookie that works. account is the
-- canonical identity, groups_json the groups the provider named (a JSON list). The session ends
-- when seen_at is older than identity.session.idle or created_at older than
-- identity.session.absolute (read at each request); cron.purge deletes such rows.
CREATE TABLE IF NOT EXISTS signin_session (
  id_hash      CHAR(64)     NOT NULL,
  account      VARCHAR(254) NOT NULL,
  display_name VARCHAR(254) NOT NULL DEFAULT '',
  groups_json  TEXT         NOT NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  seen_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id_hash),
  KEY idx_signin_session_seen (seen_at),
  KEY idx_signin_session_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
