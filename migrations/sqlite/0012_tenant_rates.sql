-- sk schema, version 12 (SQLite): rate limits per tenant of a queue, across every
-- worker, as the PostgreSQL schema's version 21.
CREATE TABLE __PREFIX__tenant_starts_t (
    starts_queue TEXT NOT NULL,
    starts_tenant TEXT NOT NULL,
    starts_log TEXT NOT NULL DEFAULT '[]',
    starts_held_until_ts TEXT NULL,
    starts_updated_at_ts TEXT NOT NULL,
    PRIMARY KEY (starts_queue, starts_tenant)
) STRICT;
