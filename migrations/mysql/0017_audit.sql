-- sk schema, version 17 (MySQL): the audit trail of operator actions; see the PostgreSQL
-- migration 0024.
CREATE TABLE IF NOT EXISTS __PREFIX__audit_t (
    audit_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    audit_at_ts DATETIME(6) NOT NULL,
    audit_actor VARCHAR(255) NOT NULL,
    audit_action VARCHAR(64) NOT NULL,
    audit_target LONGTEXT NULL,
    audit_filter LONGTEXT NULL,
    audit_jobs BIGINT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- The queues a worker's task types go to by default (`#[job(queue = ...)]`), as a JSON
-- list: a worker that serves every queue still names the queues it knows, so the
-- dashboard lists a queue whose jobs all succeeded.
ALTER TABLE __PREFIX__workers_t ADD COLUMN worker_default_queues LONGTEXT NULL;
