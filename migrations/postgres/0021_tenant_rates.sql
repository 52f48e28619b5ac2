-- sk schema, version 21 (PostgreSQL): rate limits per tenant of a queue, across every
-- worker (`Client::set_tenant_rate_limit`, docs/operations.md "Flow control").
--
-- The limit is a row of rate_limits_t (version 18) with `limit_scope` 'tenant' and the
-- queue's name; each tenant's log of starts is a row here, written by the claims that
-- start its jobs (the same sliding log as a queue's, `limit_starts`), and held shut by
-- a handler's `JobError::rate_limited` until `starts_held_until_ts`. A claim of the
-- queue reads the rows of the tenants it serves by primary key, under the limit's row
-- lock.
CREATE TABLE __SCHEMA__.__PREFIX__tenant_starts_t (
    starts_queue varchar(255) NOT NULL,
    starts_tenant varchar(255) NOT NULL,
    starts_log text NOT NULL DEFAULT '[]',
    starts_held_until_ts timestamptz NULL,
    starts_updated_at_ts timestamptz NOT NULL,
    PRIMARY KEY (starts_queue, starts_tenant)
);
