-- sk schema, version 9 (SQLite): rate limits shared by every worker, as the PostgreSQL
-- schema's version 18.
CREATE TABLE __PREFIX__rate_limits_t (
    limit_scope TEXT NOT NULL,
    limit_name TEXT NOT NULL,
    limit_count INTEGER NOT NULL CHECK (limit_count BETWEEN 1 AND 2147483647),
    limit_window_ms INTEGER NOT NULL CHECK (limit_window_ms > 0),
    limit_starts TEXT NOT NULL DEFAULT '[]',
    limit_held_until_ts TEXT NULL,
    limit_updated_at_ts TEXT NOT NULL,
    PRIMARY KEY (limit_scope, limit_name)
) STRICT;
