-- sk schema, version 12 (MySQL / MariaDB): a limit of running jobs per tenant of a
-- queue, across every worker, as the PostgreSQL schema's version 20. (Each tenant's jobs
-- are read through the fair index, which the first such claim adds: `fair_index`.)
ALTER TABLE __PREFIX__queues_t ADD COLUMN IF NOT EXISTS queue_tenant_limit INT NULL;
