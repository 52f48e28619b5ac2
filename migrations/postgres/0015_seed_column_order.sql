-- sk schema, version 15 (PostgreSQL): the seeds' column order.
-- Seed code writes and reads by position (`INSERT INTO sk_task_results_t VALUES (…)`,
-- `SELECT *`), so the results, metrics and execution-stats tables take the order of seed
-- 001's columns, sk's own columns after them (the queue table has it already). Seed 000
-- writes no owner process: the owner columns default to '' (a writer that names none).
--
-- The results table is made again in that order. Its range partitions are attached to the
-- new table as they are: PostgreSQL maps a partition's columns by name, so no row is
-- rewritten, and each partition sk creates from now on takes the new order. The default
-- partition, whose rows maintenance moves into new partitions by position, is copied, as
-- are the small metrics and stats tables.
DO $migration$
DECLARE
    parts text[];
    bounds text[];
    i int;
BEGIN
    SELECT coalesce(array_agg(c.oid::regclass::text ORDER BY c.oid), '{}'),
           coalesce(array_agg(pg_get_expr(c.relpartbound, c.oid) ORDER BY c.oid), '{}')
    INTO parts, bounds
    FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
    WHERE h.inhparent = '__SCHEMA__.__PREFIX__task_results_t'::regclass;
    FOR i IN 1 .. cardinality(parts) LOOP
        EXECUTE format('ALTER TABLE __SCHEMA__.__PREFIX__task_results_t DETACH PARTITION %s', parts[i]);
    END LOOP;
    DROP TABLE __SCHEMA__.__PREFIX__task_results_t;

    CREATE TABLE __SCHEMA__.__PREFIX__task_results_t (
        -- Seed 001's columns, in its order.
        task_id uuid NOT NULL,
        task_type varchar(255) NOT NULL,
        task_source varchar(255) NOT NULL,
        task_payload text,
        task_status integer NOT NULL,
        task_priority integer NOT NULL,
        task_last_error text,
        task_error_count integer NOT NULL DEFAULT 0,
        task_last_error_is_recoverable boolean NOT NULL DEFAULT false,
        task_processing_time_milliseconds bigint NOT NULL DEFAULT 0,
        task_posted_at_ts timestamptz NOT NULL,
        task_first_processing_attempted_at_ts timestamptz,
        task_last_processing_attempted_at_ts timestamptz,
        task_processing_finalized_at_ts timestamptz,
        -- sk's.
        task_queue varchar(255) NOT NULL DEFAULT 'default',
        task_unique_key varchar(512),
        task_unique_mode smallint,
        task_last_error_type text,
        task_last_error_message text,
        task_last_error_detail text,
        task_errors jsonb NOT NULL DEFAULT '[]',
        task_last_locked_by varchar(255),
        task_output text,
        task_tenant varchar(255),
        task_correlation_id varchar(255),
        task_metadata jsonb,
        task_max_attempts integer,
        task_timeout_ms bigint,
        PRIMARY KEY (task_id)
    ) PARTITION BY RANGE (task_id);
    -- Migration 11's check, for new rows only as there.
    ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
        ADD CONSTRAINT __PREFIX__task_results_times_are_finite CHECK (
            isfinite(task_posted_at_ts) AND isfinite(task_first_processing_attempted_at_ts)
            AND isfinite(task_last_processing_attempted_at_ts)
            AND isfinite(task_processing_finalized_at_ts)
        ) NOT VALID;
    CREATE INDEX __PREFIX__task_results_type_idx ON __SCHEMA__.__PREFIX__task_results_t (task_type)
        WHERE task_status NOT IN (1, 3);
    CREATE INDEX __PREFIX__task_results_status_idx ON __SCHEMA__.__PREFIX__task_results_t (task_status)
        WHERE task_status NOT IN (1, 3);
    CREATE INDEX __PREFIX__task_results_tenant_idx ON __SCHEMA__.__PREFIX__task_results_t (task_tenant)
        WHERE task_tenant IS NOT NULL;
    CREATE INDEX __PREFIX__task_results_correlation_idx
        ON __SCHEMA__.__PREFIX__task_results_t (task_correlation_id)
        WHERE task_correlation_id IS NOT NULL;
    CREATE INDEX __PREFIX__task_results_ended_queue_idx
        ON __SCHEMA__.__PREFIX__task_results_t (task_queue, task_status) WHERE task_status IN (6, 7);
    CREATE INDEX __PREFIX__task_results_ended_type_idx
        ON __SCHEMA__.__PREFIX__task_results_t (task_type, task_status) WHERE task_status IN (6, 7);
    CREATE INDEX __PREFIX__task_results_ended_tenant_idx
        ON __SCHEMA__.__PREFIX__task_results_t (task_tenant, task_status) WHERE task_status IN (6, 7);

    FOR i IN 1 .. cardinality(parts) LOOP
        CONTINUE WHEN bounds[i] = 'DEFAULT';
        EXECUTE format('ALTER TABLE __SCHEMA__.__PREFIX__task_results_t ATTACH PARTITION %s %s',
            parts[i], bounds[i]);
    END LOOP;

    ALTER TABLE __SCHEMA__.__PREFIX__task_results_default RENAME TO __PREFIX__task_results_default_old;
    CREATE TABLE __SCHEMA__.__PREFIX__task_results_default (
        LIKE __SCHEMA__.__PREFIX__task_results_t INCLUDING DEFAULTS
    ) WITH (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
    EXECUTE (
        SELECT format('INSERT INTO __SCHEMA__.__PREFIX__task_results_default (%1$s)
                       SELECT %1$s FROM __SCHEMA__.__PREFIX__task_results_default_old',
            string_agg(quote_ident(attname), ', ' ORDER BY attnum))
        FROM pg_attribute
        WHERE attrelid = '__SCHEMA__.__PREFIX__task_results_t'::regclass AND attnum > 0 AND NOT attisdropped
    );
    DROP TABLE __SCHEMA__.__PREFIX__task_results_default_old;
    -- Added after the copy, for new rows only: old rows need not pass (as in migration 11).
    ALTER TABLE __SCHEMA__.__PREFIX__task_results_default
        ADD CONSTRAINT __PREFIX__task_results_times_are_finite CHECK (
            isfinite(task_posted_at_ts) AND isfinite(task_first_processing_attempted_at_ts)
            AND isfinite(task_last_processing_attempted_at_ts)
            AND isfinite(task_processing_finalized_at_ts)
        ) NOT VALID;
    ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
        ATTACH PARTITION __SCHEMA__.__PREFIX__task_results_default DEFAULT;
    -- Only the default partition prunes by rows: by finalization time, as ids there are
    -- not ordered by time.
    CREATE INDEX __PREFIX__task_results_default_finalized_idx
        ON __SCHEMA__.__PREFIX__task_results_default (task_processing_finalized_at_ts)
        WHERE task_processing_finalized_at_ts IS NOT NULL;
END
$migration$;

ALTER TABLE __SCHEMA__.__PREFIX__metrics_t RENAME TO __PREFIX__metrics_old;
ALTER TABLE __SCHEMA__.__PREFIX__metrics_old RENAME CONSTRAINT __PREFIX__metrics_t_pkey TO __PREFIX__metrics_old_pkey;
DROP INDEX __SCHEMA__.__PREFIX__metrics_category_idx;
CREATE TABLE __SCHEMA__.__PREFIX__metrics_t (
    metric_id varchar(255) NOT NULL,
    metric_owner_process_id varchar(255) NOT NULL DEFAULT '',
    metric_category varchar(255) NOT NULL,
    metric_value bigint NOT NULL DEFAULT 0,
    metric_last_updated timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (metric_id, metric_owner_process_id)
);
CREATE INDEX __PREFIX__metrics_category_idx ON __SCHEMA__.__PREFIX__metrics_t (metric_category);
INSERT INTO __SCHEMA__.__PREFIX__metrics_t
SELECT metric_id, metric_owner_process_id, metric_category, metric_value, metric_last_updated
FROM __SCHEMA__.__PREFIX__metrics_old;
DROP TABLE __SCHEMA__.__PREFIX__metrics_old;

ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME TO __PREFIX__task_execution_time_stats_old;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_old
    RENAME CONSTRAINT __PREFIX__task_execution_time_stats_t_pkey TO __PREFIX__task_execution_time_stats_old_pkey;
CREATE TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t (
    et_payload_type varchar(255) NOT NULL,
    et_owner_process_id varchar(255) NOT NULL DEFAULT '',
    et_n_execution_cycles bigint NOT NULL,
    et_last_execution_time bigint NOT NULL DEFAULT 0,
    et_avg_execution_time bigint NOT NULL,
    et_fastest_execution_time bigint NOT NULL,
    et_longest_execution_time bigint NOT NULL,
    et_total_execution_time bigint NOT NULL,
    et_last_updated_ts timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (et_payload_type, et_owner_process_id)
);
INSERT INTO __SCHEMA__.__PREFIX__task_execution_time_stats_t
SELECT et_payload_type, et_owner_process_id, et_n_execution_cycles, et_last_execution_time,
    et_avg_execution_time, et_fastest_execution_time, et_longest_execution_time,
    et_total_execution_time, et_last_updated_ts
FROM __SCHEMA__.__PREFIX__task_execution_time_stats_old;
DROP TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_old;
