-- sk schema, version 8 (SQLite): seed 002's `version`, which counts an application's
-- changes to a waiting job (`Client::update`, `reschedule`, `reprioritize`) so that one
-- can name the version it read (compare and set). (Seed 002's `updated_at` is kept on
-- PostgreSQL and MySQL/MariaDB; SQLite's record has none.)
ALTER TABLE __PREFIX__tasks_queue_t ADD COLUMN task_version INTEGER NOT NULL DEFAULT 0;
