-- sk schema, version 22 (PostgreSQL): fair claims as a queue's stored control
-- (`Client::set_fair`, `WorkerBuilder::fair`, docs/operations.md "Flow control").
--
-- Since when every worker claims the queue fairly across its tenants; NULL: in the
-- queue's order. Workers read it with the queue's pause and limits, within a second.
ALTER TABLE __SCHEMA__.__PREFIX__queues_t ADD COLUMN queue_fair_at_ts timestamptz NULL;
