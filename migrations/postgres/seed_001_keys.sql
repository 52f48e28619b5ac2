-- Seed 001's keys again (`SeedKeys::PerProcess`, the default), undoing seed_000_keys.sql:
-- each writer's rows are its own from here; the folded rows stay, owned by ''.
DROP TRIGGER IF EXISTS __PREFIX__metrics_one_per_id ON __SCHEMA__.__PREFIX__metrics_t;
DROP TRIGGER IF EXISTS __PREFIX__stats_one_per_type ON __SCHEMA__.__PREFIX__task_execution_time_stats_t;
DROP FUNCTION IF EXISTS __SCHEMA__.__PREFIX__metrics_one_per_id();
DROP FUNCTION IF EXISTS __SCHEMA__.__PREFIX__stats_one_per_type();
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__metrics_id_key;
DROP INDEX IF EXISTS __SCHEMA__.__PREFIX__task_execution_time_stats_type_key;
