-- sk schema, version 16 (SQLite): workflows on record, as the PostgreSQL schema's
-- version 25.
CREATE TABLE __PREFIX__workflows_t (
    workflow_id BLOB PRIMARY KEY,
    workflow_stages INTEGER NOT NULL,
    workflow_jobs INTEGER NOT NULL,
    workflow_created_at_ts TEXT NOT NULL
) STRICT;
CREATE INDEX __PREFIX__workflows_created_idx ON __PREFIX__workflows_t (workflow_created_at_ts);

CREATE TABLE __PREFIX__workflow_jobs_t (
    task_id BLOB PRIMARY KEY,
    workflow_id BLOB NOT NULL,
    workflow_stage INTEGER NOT NULL
) STRICT;
CREATE INDEX __PREFIX__workflow_jobs_workflow_idx ON __PREFIX__workflow_jobs_t (workflow_id);
