-- sk schema, version 15 (MySQL / MariaDB): fair claims as a queue's stored control, as
-- the PostgreSQL schema's version 22.
ALTER TABLE __PREFIX__queues_t ADD COLUMN IF NOT EXISTS queue_fair_at_ts DATETIME(6) NULL;
