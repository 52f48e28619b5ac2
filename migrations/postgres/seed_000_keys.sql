-- Seed 000's keys (`sk_runtime::SeedKeys::OnePerName`, `sk migrate --seed-keys 000`), not
-- a numbered migration: one row per metric id and per payload type, each unique on that
-- column alone, so seed 000's `ON CONFLICT (metric_id)` and `ON CONFLICT (et_payload_type)`
-- find their constraint. A trigger folds every insert into that row (owner ''), which a
-- BEFORE INSERT trigger does ahead of the conflict check: seed 001's writers and sk's
-- workers, whose upserts name (id, owner), land on it too. The rows already there are
-- folded: the stats added up, the newest value of each metric kept.
LOCK TABLE __SCHEMA__.__PREFIX__metrics_t, __SCHEMA__.__PREFIX__task_execution_time_stats_t
    IN ACCESS EXCLUSIVE MODE;

-- Both tables are made again in seed 000's column order, sk's owner column (and the
-- stats' update time) after the seed's, so seed 000's positional writes (four metric
-- values, seven stats values) land in its columns; before, they failed ("metric_value is
-- of type bigint but expression is of type timestamp"). The rows are folded on the way.
ALTER TABLE __SCHEMA__.__PREFIX__metrics_t RENAME TO __PREFIX__metrics_keyed;
ALTER TABLE __SCHEMA__.__PREFIX__metrics_keyed
    RENAME CONSTRAINT __PREFIX__metrics_t_pkey TO __PREFIX__metrics_keyed_pkey;
DROP INDEX __SCHEMA__.__PREFIX__metrics_category_idx;
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__metrics_id_key;
CREATE TABLE __SCHEMA__.__PREFIX__metrics_t (
    metric_id varchar(255) NOT NULL,
    metric_category varchar(255) NOT NULL,
    metric_value bigint NOT NULL DEFAULT 0,
    metric_last_updated timestamptz NOT NULL DEFAULT now(),
    metric_owner_process_id varchar(255) NOT NULL DEFAULT '',
    PRIMARY KEY (metric_id, metric_owner_process_id)
);
CREATE INDEX __PREFIX__metrics_category_idx ON __SCHEMA__.__PREFIX__metrics_t (metric_category);
INSERT INTO __SCHEMA__.__PREFIX__metrics_t (metric_id, metric_owner_process_id, metric_category,
    metric_value, metric_last_updated)
SELECT DISTINCT ON (metric_id) metric_id, '', metric_category, metric_value, metric_last_updated
FROM __SCHEMA__.__PREFIX__metrics_keyed ORDER BY metric_id, metric_last_updated DESC;
DROP TABLE __SCHEMA__.__PREFIX__metrics_keyed;

ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME TO __PREFIX__task_execution_time_stats_keyed;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_keyed
    RENAME CONSTRAINT __PREFIX__task_execution_time_stats_t_pkey TO __PREFIX__task_execution_time_stats_keyed_pkey;
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__task_execution_time_stats_type_key;
CREATE TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t (
    et_payload_type varchar(255) NOT NULL,
    et_n_execution_cycles bigint NOT NULL,
    et_last_execution_time bigint NOT NULL DEFAULT 0,
    et_avg_execution_time bigint NOT NULL,
    et_fastest_execution_time bigint NOT NULL,
    et_longest_execution_time bigint NOT NULL,
    et_total_execution_time bigint NOT NULL,
    et_owner_process_id varchar(255) NOT NULL DEFAULT '',
    et_last_updated_ts timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (et_payload_type, et_owner_process_id)
);
INSERT INTO __SCHEMA__.__PREFIX__task_execution_time_stats_t (et_payload_type, et_owner_process_id,
    et_n_execution_cycles, et_last_execution_time, et_avg_execution_time, et_fastest_execution_time,
    et_longest_execution_time, et_total_execution_time, et_last_updated_ts)
SELECT et_payload_type, '', sum(et_n_execution_cycles),
    (array_agg(et_last_execution_time ORDER BY et_last_updated_ts DESC))[1],
    sum(et_total_execution_time) / greatest(sum(et_n_execution_cycles), 1),
    min(et_fastest_execution_time), max(et_longest_execution_time), sum(et_total_execution_time),
    max(et_last_updated_ts)
FROM __SCHEMA__.__PREFIX__task_execution_time_stats_keyed GROUP BY et_payload_type;
DROP TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_keyed;

CREATE UNIQUE INDEX IF NOT EXISTS __PREFIX__metrics_id_key
    ON __SCHEMA__.__PREFIX__metrics_t (metric_id);
CREATE UNIQUE INDEX IF NOT EXISTS __PREFIX__task_execution_time_stats_type_key
    ON __SCHEMA__.__PREFIX__task_execution_time_stats_t (et_payload_type);

CREATE OR REPLACE FUNCTION __SCHEMA__.__PREFIX__metrics_one_per_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.metric_owner_process_id := '';
    RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION __SCHEMA__.__PREFIX__stats_one_per_type() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.et_owner_process_id := '';
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER __PREFIX__metrics_one_per_id
    BEFORE INSERT ON __SCHEMA__.__PREFIX__metrics_t
    FOR EACH ROW EXECUTE FUNCTION __SCHEMA__.__PREFIX__metrics_one_per_id();
CREATE OR REPLACE TRIGGER __PREFIX__stats_one_per_type
    BEFORE INSERT ON __SCHEMA__.__PREFIX__task_execution_time_stats_t
    FOR EACH ROW EXECUTE FUNCTION __SCHEMA__.__PREFIX__stats_one_per_type();
