-- sk schema, version 18 (PostgreSQL): rate limits shared by every worker
-- (`Client::set_rate_limit`, docs/operations.md "Flow control").
--
-- One row per limited key: `limit_scope` says what the name names ('queue', 'type'). A
-- claim of a limited key locks its row, takes at most `limit_count` less the starts of
-- the last `limit_window_ms`, and appends its own starts to `limit_starts`, a JSON
-- array of [microseconds since the epoch, jobs] pairs (a sliding log, one pair per
-- claim). `limit_held_until_ts`: no claim of the key starts a job before then.
CREATE TABLE __SCHEMA__.__PREFIX__rate_limits_t (
    limit_scope varchar(16) NOT NULL,
    limit_name varchar(255) NOT NULL,
    limit_count integer NOT NULL CHECK (limit_count > 0),
    limit_window_ms bigint NOT NULL CHECK (limit_window_ms > 0),
    limit_starts text NOT NULL DEFAULT '[]',
    limit_held_until_ts timestamptz NULL,
    limit_updated_at_ts timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (limit_scope, limit_name)
);
