-- Seed 001's keys again (`SeedKeys::PerProcess`, the default), undoing seed_000_keys.sql:
-- each writer's rows are its own from here; the folded rows stay, owned by ''. Both
-- tables take seed 001's column order again (the owner second) where seed 000's made
-- them over, for seed 001's positional writes.
DROP TRIGGER IF EXISTS __PREFIX__metrics_one_per_id ON __SCHEMA__.__PREFIX__metrics_t;
DROP TRIGGER IF EXISTS __PREFIX__stats_one_per_type ON __SCHEMA__.__PREFIX__task_execution_time_stats_t;
DROP FUNCTION IF EXISTS __SCHEMA__.__PREFIX__metrics_one_per_id();
DROP FUNCTION IF EXISTS __SCHEMA__.__PREFIX__stats_one_per_type();
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__metrics_id_key;
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__task_execution_time_stats_type_key;

DO $keys$
BEGIN
    IF (SELECT attnum FROM pg_attribute
        WHERE attrelid = '__SCHEMA__.__PREFIX__metrics_t'::regclass
          AND attname = 'metric_owner_process_id') = 2 THEN
        RETURN;
    END IF;
    LOCK TABLE __SCHEMA__.__PREFIX__metrics_t, __SCHEMA__.__PREFIX__task_execution_time_stats_t
        IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE __SCHEMA__.__PREFIX__metrics_t RENAME TO __PREFIX__metrics_keyed;
    ALTER TABLE __SCHEMA__.__PREFIX__metrics_keyed
        RENAME CONSTRAINT __PREFIX__metrics_t_pkey TO __PREFIX__metrics_keyed_pkey;
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
    INSERT INTO __SCHEMA__.__PREFIX__metrics_t (metric_id, metric_owner_process_id, metric_category,
        metric_value, metric_last_updated)
    SELECT metric_id, metric_owner_process_id, metric_category, metric_value, metric_last_updated
    FROM __SCHEMA__.__PREFIX__metrics_keyed;
    DROP TABLE __SCHEMA__.__PREFIX__metrics_keyed;

    ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME TO __PREFIX__task_execution_time_stats_keyed;
    ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_keyed
        RENAME CONSTRAINT __PREFIX__task_execution_time_stats_t_pkey TO __PREFIX__task_execution_time_stats_keyed_pkey;
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
    INSERT INTO __SCHEMA__.__PREFIX__task_execution_time_stats_t (et_payload_type, et_owner_process_id,
        et_n_execution_cycles, et_last_execution_time, et_avg_execution_time, et_fastest_execution_time,
        et_longest_execution_time, et_total_execution_time, et_last_updated_ts)
    SELECT et_payload_type, et_owner_process_id, et_n_execution_cycles, et_last_execution_time,
        et_avg_execution_time, et_fastest_execution_time, et_longest_execution_time,
        et_total_execution_time, et_last_updated_ts
    FROM __SCHEMA__.__PREFIX__task_execution_time_stats_keyed;
    DROP TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_keyed;
END
$keys$;
