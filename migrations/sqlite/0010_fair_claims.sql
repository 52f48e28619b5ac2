-- sk schema, version 10 (SQLite): fair claims across tenants, as the PostgreSQL schema's
-- version 19 (a partial index: jobs without a tenant never enter it).
CREATE INDEX __PREFIX__tasks_queue_fair_idx
    ON __PREFIX__tasks_queue_t
    (task_queue, task_tenant, task_priority, task_locked_until_ts, task_lock_handle_id)
    WHERE task_tenant IS NOT NULL;
