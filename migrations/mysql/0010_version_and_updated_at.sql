-- sk schema, version 10 (MySQL / MariaDB): seed 002's `version` and `updated_at`.
-- `task_version` counts an application's changes to a waiting job (`Client::update`,
-- `reschedule`, `reprioritize`), which can name the version they read (compare and set).
-- `task_updated_at_ts` is the seed's own column: a TIMESTAMP the server sets on every
-- insert and update (stored in UTC; read through `CONVERT_TZ` from the session's zone).
ALTER TABLE __PREFIX__tasks_queue_t
    ADD COLUMN IF NOT EXISTS task_version INT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS task_updated_at_ts TIMESTAMP(6) NOT NULL
        DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6);
ALTER TABLE __PREFIX__task_results_t
    ADD COLUMN IF NOT EXISTS task_updated_at_ts TIMESTAMP(6) NOT NULL
        DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6);
