-- sk schema, version 12 (MySQL / MariaDB): fair claims across tenants, as the PostgreSQL
-- schema's version 19. InnoDB has no partial index, so every queue row enters this one,
-- with or without a tenant: its cost on enqueue and claim is in docs/performance.md.
ALTER TABLE __PREFIX__tasks_queue_t
    ADD INDEX IF NOT EXISTS __PREFIX__tasks_queue_fair
    (task_queue, task_tenant, task_priority, task_locked_until_ts, task_lock_handle_id);
