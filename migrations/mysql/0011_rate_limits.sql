-- sk schema, version 11 (MySQL / MariaDB): rate limits shared by every worker, as the
-- PostgreSQL schema's version 18.
CREATE TABLE IF NOT EXISTS __PREFIX__rate_limits_t (
    limit_scope VARCHAR(16) COLLATE utf8mb4_bin NOT NULL,
    limit_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    limit_count INT NOT NULL CHECK (limit_count > 0),
    limit_window_ms BIGINT NOT NULL CHECK (limit_window_ms > 0),
    limit_starts LONGTEXT NOT NULL DEFAULT '[]',
    limit_held_until_ts DATETIME(6) NULL,
    limit_updated_at_ts DATETIME(6) NOT NULL,
    PRIMARY KEY (limit_scope, limit_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
