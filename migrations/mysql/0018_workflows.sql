-- sk schema, version 18 (MySQL / MariaDB): workflows on record, as the PostgreSQL
-- schema's version 25.
CREATE TABLE IF NOT EXISTS __PREFIX__workflows_t (
    workflow_id BINARY(16) NOT NULL PRIMARY KEY,
    workflow_stages INT NOT NULL,
    workflow_jobs INT NOT NULL,
    workflow_created_at_ts DATETIME(6) NOT NULL,
    KEY __PREFIX__workflows_created (workflow_created_at_ts)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS __PREFIX__workflow_jobs_t (
    task_id BINARY(16) NOT NULL PRIMARY KEY,
    workflow_id BINARY(16) NOT NULL,
    workflow_stage INT NOT NULL,
    KEY __PREFIX__workflow_jobs_workflow (workflow_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
