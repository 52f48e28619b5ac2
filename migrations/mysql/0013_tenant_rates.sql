-- sk schema, version 13 (MySQL / MariaDB): rate limits per tenant of a queue, across
-- every worker, as the PostgreSQL schema's version 21.
CREATE TABLE IF NOT EXISTS __PREFIX__tenant_starts_t (
    starts_queue VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    starts_tenant VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    starts_log LONGTEXT NOT NULL DEFAULT '[]',
    starts_held_until_ts DATETIME(6) NULL,
    starts_updated_at_ts DATETIME(6) NOT NULL,
    PRIMARY KEY (starts_queue, starts_tenant)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
