-- sk schema, version 19 (MySQL): the task types the workers run, with their schemas; see
-- the PostgreSQL migration 0026.
CREATE TABLE IF NOT EXISTS __PREFIX__task_types_t (
    type_name VARCHAR(255) NOT NULL PRIMARY KEY,
    type_schema LONGTEXT NOT NULL,
    type_published_by VARCHAR(255) NOT NULL,
    type_published_at_ts DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
