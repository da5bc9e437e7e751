-- What the request page links besides the MR and the pipeline.
--
-- failed_job: the first failed job of a pipeline that failed for good, looked up once from GitLab
-- when bindery gave up on the pipeline (best effort: no row, no link). Keyed by the pipeline, so
-- every request the pipeline carried finds it, in both flows.
--
-- operation.ticket_id: the approval ticket the request was sent with ('' : none, or an id
-- bindery does not show), for the ticket link (approval.ticketURL).
CREATE TABLE IF NOT EXISTS failed_job (
  project      VARCHAR(255)  NOT NULL,
  pipeline_id  BIGINT        NOT NULL,
  job_id       BIGINT        NOT NULL,
  name         VARCHAR(255)  NOT NULL,
  web_url      VARCHAR(1024) NOT NULL,
  created_at   DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (project, pipeline_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
ALTER TABLE operation ADD COLUMN IF NOT EXISTS ticket_id VARCHAR(64) NOT NULL DEFAULT '';
