-- sk schema, version 13 (SQLite): fair claims as a queue's stored control, as the
-- PostgreSQL schema's version 22.
ALTER TABLE __PREFIX__queues_t ADD COLUMN queue_fair_at_ts TEXT NULL;
