-- sk schema, version 3 (PostgreSQL): fewer writes per job (docs/performance.md).

-- The claim stamps the queue row (which it updates anyway); finalization copies the stamp
-- into the results row, so the results row is written once per run instead of twice.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t ADD COLUMN task_claimed_at_ts timestamptz NULL;

-- The payload lives in the queue row while the job is live; results keep it only for jobs
-- that failed for good (to inspect or re-post them).
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t ALTER COLUMN task_payload DROP NOT NULL;

-- Only scheduled ticks carry a unique key: index just those rows.
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t DROP CONSTRAINT IF EXISTS __PREFIX__task_results_t_task_unique_key_key;
CREATE UNIQUE INDEX __PREFIX__task_results_unique_key_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_unique_key) WHERE task_unique_key IS NOT NULL;

-- Pruning walks the primary key instead: task ids are UUIDv7, ordered by posting time.
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__task_results_finalized_idx;
