-- sk schema, version 9 (MySQL / MariaDB): seed 002's retry group, external id and
-- sub-state, kept in the job's metadata (the seed's `jobs_data`) under those keys, as
-- virtual columns that filters name (MariaDB uses an index on an expression only through
-- such a column). The results table indexes the retry group and the external id; the
-- queue table none (InnoDB has no partial index, and each entry would cost every enqueue:
-- migration 8), so a lookup of a live job reads its rows.
ALTER TABLE __PREFIX__tasks_queue_t
    ADD COLUMN IF NOT EXISTS task_retry_group VARCHAR(255)
        AS (JSON_UNQUOTE(JSON_EXTRACT(task_metadata, '$.retry_group'))) VIRTUAL,
    ADD COLUMN IF NOT EXISTS task_external_id VARCHAR(255)
        AS (JSON_UNQUOTE(JSON_EXTRACT(task_metadata, '$.external_id'))) VIRTUAL,
    ADD COLUMN IF NOT EXISTS task_sub_state VARCHAR(255)
        AS (JSON_UNQUOTE(JSON_EXTRACT(task_metadata, '$.sub_state'))) VIRTUAL;
ALTER TABLE __PREFIX__task_results_t
    ADD COLUMN IF NOT EXISTS task_retry_group VARCHAR(255)
        AS (JSON_UNQUOTE(JSON_EXTRACT(task_metadata, '$.retry_group'))) VIRTUAL,
    ADD COLUMN IF NOT EXISTS task_external_id VARCHAR(255)
        AS (JSON_UNQUOTE(JSON_EXTRACT(task_metadata, '$.external_id'))) VIRTUAL,
    ADD COLUMN IF NOT EXISTS task_sub_state VARCHAR(255)
        AS (JSON_UNQUOTE(JSON_EXTRACT(task_metadata, '$.sub_state'))) VIRTUAL;
ALTER TABLE __PREFIX__task_results_t
    ADD INDEX IF NOT EXISTS __PREFIX__task_results_retry_group_idx (task_retry_group),
    ADD INDEX IF NOT EXISTS __PREFIX__task_results_external_id_idx (task_external_id);
