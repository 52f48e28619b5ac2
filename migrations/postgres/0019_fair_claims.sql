-- sk schema, version 19 (PostgreSQL): fair claims across tenants
-- (`WorkerBuilder::fair`, docs/operations.md "Flow control").
--
-- A fair claim finds the tenants with due jobs in a queue (a skip scan: one index probe
-- per tenant) and takes each tenant's jobs in the claim order, so a small tenant's jobs
-- are not read past a large tenant's backlog. Partial: a job without a tenant never
-- enters it, so queues without tenants pay nothing for it. Tenants in byte order
-- (`COLLATE "C"`), whatever the database's collation, as the worker orders them.
CREATE INDEX __PREFIX__tasks_queue_fair_idx
    ON __SCHEMA__.__PREFIX__tasks_queue_t
    (task_queue, task_tenant COLLATE "C", task_priority, task_locked_until_ts, task_lock_handle_id)
    WHERE task_tenant IS NOT NULL;
