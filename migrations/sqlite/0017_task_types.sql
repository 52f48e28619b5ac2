-- sk schema, version 17 (SQLite): the task types the workers run, with their schemas;
-- see the PostgreSQL migration 0026.
CREATE TABLE __PREFIX__task_types_t (
    type_name TEXT NOT NULL PRIMARY KEY,
    type_schema TEXT NOT NULL,
    type_published_by TEXT NOT NULL,
    type_published_at_ts TEXT NOT NULL
) STRICT;
