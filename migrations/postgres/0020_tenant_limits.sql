-- sk schema, version 20 (PostgreSQL): a limit of running jobs per tenant of a queue,
-- across every worker (`Client::set_tenant_limit`, docs/operations.md "Flow control").
--
-- At most this many jobs of each tenant of the queue run at once; NULL: no limit. A
-- claim of such a queue locks the queue's row (as a global limit's claim does), counts
-- each tenant's running jobs through tasks_queue_running_idx (version 8), and takes each
-- tenant's jobs through the fair index (version 19), up to the tenant's room.
ALTER TABLE __SCHEMA__.__PREFIX__queues_t ADD COLUMN queue_tenant_limit integer NULL
    CHECK (queue_tenant_limit > 0);
