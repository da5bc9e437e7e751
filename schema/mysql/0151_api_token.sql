-- Personal API tokens (docs/api.md, 'API tokens'). A token is "bdy_" and 32 random bytes
-- (base64url); the row keeps lookup_key, the hex of its first 8 bytes, to find it, and
-- secret_hash, the SHA-256 of the whole token, compared in constant time: the secret itself is
-- shown once and never stored. scopes is "read" or "read apply". slot numbers the owner's live
-- tokens (1..50): the unique key caps them however many requests create one at once; a revoked
-- or expired token gives its slot up (NULL). A revoked token keeps its row (revoked_at) so that
-- its use is answered "revoked"; cron.purge deletes rows expired or revoked 30 days ago.
CREATE TABLE IF NOT EXISTS api_token (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  owner        VARCHAR(254) NOT NULL,
  slot         INT          NULL,
  name         VARCHAR(64)  NOT NULL,
  scopes       VARCHAR(32)  NOT NULL,
  lookup_key   CHAR(16)     NOT NULL,
  secret_hash  CHAR(64)     NOT NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  expires_at   DATETIME(6)  NOT NULL,
  last_used_at DATETIME(6)  NULL,
  revoked_at   DATETIME(6)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_api_token_lookup (lookup_key),
  UNIQUE KEY uk_api_token_slot (owner, slot),
  KEY idx_api_token_owner (owner, created_at),
  KEY idx_api_token_expires (expires_at),
  KEY idx_api_token_revoked (revoked_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
