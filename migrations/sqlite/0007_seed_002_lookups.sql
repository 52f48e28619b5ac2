-- sk schema, version 7 (SQLite): seed 002's retry group and external id, found by index.
-- sk keeps them in the job's metadata (the seed's `jobs_data`) under the keys
-- `retry_group` and `external_id`; these partial indexes hold only the rows that have one.
CREATE INDEX IF NOT EXISTS __PREFIX__tasks_queue_external_id_idx
    ON __PREFIX__tasks_queue_t (json_extract(task_metadata, '$.external_id'))
    WHERE json_extract(task_metadata, '$.external_id') IS NOT NULL;
CREATE INDEX IF NOT EXISTS __PREFIX__tasks_queue_retry_group_idx
    ON __PREFIX__tasks_queue_t (json_extract(task_metadata, '$.retry_group'))
    WHERE json_extract(task_metadata, '$.retry_group') IS NOT NULL;
CREATE INDEX IF NOT EXISTS __PREFIX__task_results_external_id_idx
    ON __PREFIX__task_results_t (json_extract(task_metadata, '$.external_id'))
    WHERE json_extract(task_metadata, '$.external_id') IS NOT NULL;
CREATE INDEX IF NOT EXISTS __PREFIX__task_results_retry_group_idx
    ON __PREFIX__task_results_t (json_extract(task_metadata, '$.retry_group'))
    WHERE json_extract(task_metadata, '$.retry_group') IS NOT NULL;
