-- sk schema, version 5 (PostgreSQL): the results table is partitioned by time (seed 002).
--
-- Range partitions on `task_id`: sk's ids are UUIDv7, whose leading 48 bits are the
-- posting time in milliseconds, so a range of ids is a range of posting times and a
-- lookup by id touches one partition. Maintenance creates the partitions ahead of time
-- (`WorkerBuilder::results_partition`) and retires whole partitions past the retention,
-- dropping or archiving them (`WorkerBuilder::archive_results_to`) instead of deleting
-- rows, so pruning leaves no dead rows. The default partition takes every id no range
-- covers: ids that are not UUIDv7 (a seed producer's random ids), and the rows written
-- before this version (the old table becomes the default partition, unchanged). Its
-- rows are pruned one by one, by finalization time, as before.

-- A cron tick is enqueued once across workers by its id (a UUIDv7 of the tick's time
-- made from its key), which the primary key makes unique in every partition; a unique
-- index on another column cannot span partitions.
DROP INDEX __SCHEMA__.__PREFIX__task_results_unique_key_idx;

ALTER TABLE __SCHEMA__.__PREFIX__task_results_t RENAME TO __PREFIX__task_results_default;
ALTER TABLE __SCHEMA__.__PREFIX__task_results_default
    RENAME CONSTRAINT __PREFIX__task_results_t_pkey TO __PREFIX__task_results_default_pkey;
ALTER INDEX __SCHEMA__.__PREFIX__task_results_type_idx RENAME TO __PREFIX__task_results_default_type_idx;
ALTER INDEX __SCHEMA__.__PREFIX__task_results_status_idx RENAME TO __PREFIX__task_results_default_status_idx;
ALTER INDEX __SCHEMA__.__PREFIX__task_results_tenant_idx RENAME TO __PREFIX__task_results_default_tenant_idx;
ALTER INDEX __SCHEMA__.__PREFIX__task_results_correlation_idx
    RENAME TO __PREFIX__task_results_default_correlation_idx;

CREATE TABLE __SCHEMA__.__PREFIX__task_results_t (
    LIKE __SCHEMA__.__PREFIX__task_results_default INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY RANGE (task_id);
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t ADD PRIMARY KEY (task_id);
CREATE INDEX __PREFIX__task_results_type_idx ON __SCHEMA__.__PREFIX__task_results_t (task_type)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_status_idx ON __SCHEMA__.__PREFIX__task_results_t (task_status)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_tenant_idx ON __SCHEMA__.__PREFIX__task_results_t (task_tenant)
    WHERE task_tenant IS NOT NULL;
CREATE INDEX __PREFIX__task_results_correlation_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_correlation_id)
    WHERE task_correlation_id IS NOT NULL;
-- The old table's indexes match the new ones, so attaching it builds none.
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ATTACH PARTITION __SCHEMA__.__PREFIX__task_results_default DEFAULT;
-- Only the default partition prunes by rows: by finalization time, as ids there are not
-- ordered by time.
CREATE INDEX __PREFIX__task_results_default_finalized_idx
    ON __SCHEMA__.__PREFIX__task_results_default (task_processing_finalized_at_ts)
    WHERE task_processing_finalized_at_ts IS NOT NULL;
