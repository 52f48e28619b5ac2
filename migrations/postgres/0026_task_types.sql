-- sk schema, version 26 (PostgreSQL): the task types the workers run, each with the JSON
-- document of its defaults and the JSON Schema of its arguments (`sk_runtime::schema`'s
-- entry for it). A worker writes its types' rows at start (`WorkerBuilder::
-- publish_schemas`); producers in other languages (clients/), `sk schema` and
-- `Client::enqueue_json` read them. The last worker to start writes a type's row.
CREATE TABLE __SCHEMA__.__PREFIX__task_types_t (
    type_name varchar(255) PRIMARY KEY,
    type_schema text NOT NULL,
    type_published_by varchar(255) NOT NULL,
    type_published_at_ts timestamptz NOT NULL
);
