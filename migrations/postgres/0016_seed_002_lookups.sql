-- sk schema, version 16 (PostgreSQL): seed 002's retry group and external id, found by
-- index. sk keeps them in the job's metadata (the seed's `jobs_data`) under the keys
-- `retry_group` and `external_id`; these partial indexes hold only the rows that have one,
-- so a job without either writes no entry.
CREATE INDEX __PREFIX__tasks_queue_external_id_idx
    ON __SCHEMA__.__PREFIX__tasks_queue_t ((task_metadata ->> 'external_id'))
    WHERE (task_metadata ->> 'external_id') IS NOT NULL;
CREATE INDEX __PREFIX__tasks_queue_retry_group_idx
    ON __SCHEMA__.__PREFIX__tasks_queue_t ((task_metadata ->> 'retry_group'))
    WHERE (task_metadata ->> 'retry_group') IS NOT NULL;
CREATE INDEX __PREFIX__task_results_external_id_idx
    ON __SCHEMA__.__PREFIX__task_results_t ((task_metadata ->> 'external_id'))
    WHERE (task_metadata ->> 'external_id') IS NOT NULL;
CREATE INDEX __PREFIX__task_results_retry_group_idx
    ON __SCHEMA__.__PREFIX__task_results_t ((task_metadata ->> 'retry_group'))
    WHERE (task_metadata ->> 'retry_group') IS NOT NULL;
