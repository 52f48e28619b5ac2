-- sk schema, version 16 (MySQL / MariaDB): batches of jobs with callbacks, as the
-- PostgreSQL schema's version 23.
CREATE TABLE IF NOT EXISTS __PREFIX__batches_t (
    batch_id BINARY(16) NOT NULL PRIMARY KEY,
    batch_description LONGTEXT NULL,
    batch_total INT NOT NULL,
    batch_pending INT NOT NULL,
    batch_succeeded INT NOT NULL DEFAULT 0,
    batch_failed INT NOT NULL DEFAULT 0,
    batch_cancelled INT NOT NULL DEFAULT 0,
    batch_created_at_ts DATETIME(6) NOT NULL,
    batch_finished_at_ts DATETIME(6) NULL,
    KEY __PREFIX__batches_created (batch_created_at_ts)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS __PREFIX__batch_jobs_t (
    task_id BINARY(16) NOT NULL PRIMARY KEY,
    batch_id BINARY(16) NOT NULL,
    job_status SMALLINT NOT NULL,
    KEY __PREFIX__batch_jobs_batch (batch_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS __PREFIX__batch_callbacks_t (
    batch_id BINARY(16) NOT NULL,
    callback_event SMALLINT NOT NULL,
    task_id BINARY(16) NOT NULL,
    task_type VARCHAR(255) NOT NULL,
    callback_job LONGTEXT NOT NULL,
    callback_fired_at_ts DATETIME(6) NULL,
    PRIMARY KEY (batch_id, callback_event)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
