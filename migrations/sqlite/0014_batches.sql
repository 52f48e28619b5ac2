-- sk schema, version 14 (SQLite): batches of jobs with callbacks, as the PostgreSQL
-- schema's version 23.
CREATE TABLE __PREFIX__batches_t (
    batch_id BLOB PRIMARY KEY,
    batch_description TEXT NULL,
    batch_total INTEGER NOT NULL,
    batch_pending INTEGER NOT NULL,
    batch_succeeded INTEGER NOT NULL DEFAULT 0,
    batch_failed INTEGER NOT NULL DEFAULT 0,
    batch_cancelled INTEGER NOT NULL DEFAULT 0,
    batch_created_at_ts TEXT NOT NULL,
    batch_finished_at_ts TEXT NULL
) STRICT;
CREATE INDEX __PREFIX__batches_created_idx ON __PREFIX__batches_t (batch_created_at_ts);

CREATE TABLE __PREFIX__batch_jobs_t (
    task_id BLOB PRIMARY KEY,
    batch_id BLOB NOT NULL,
    job_status INTEGER NOT NULL
) STRICT;
CREATE INDEX __PREFIX__batch_jobs_batch_idx ON __PREFIX__batch_jobs_t (batch_id);

CREATE TABLE __PREFIX__batch_callbacks_t (
    batch_id BLOB NOT NULL,
    callback_event INTEGER NOT NULL,
    task_id BLOB NOT NULL,
    task_type TEXT NOT NULL,
    callback_job TEXT NOT NULL,
    callback_fired_at_ts TEXT NULL,
    PRIMARY KEY (batch_id, callback_event)
) STRICT;
