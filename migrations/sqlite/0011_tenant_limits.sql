-- sk schema, version 11 (SQLite): a limit of running jobs per tenant of a queue, across
-- every worker, as the PostgreSQL schema's version 20.
ALTER TABLE __PREFIX__queues_t ADD COLUMN queue_tenant_limit INTEGER NULL
    CHECK (queue_tenant_limit BETWEEN 1 AND 2147483647);
