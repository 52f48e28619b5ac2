-- sk schema, version 6 (MySQL / MariaDB): the queue table refuses a posting time sk could
-- not read.
--
-- MariaDB's default SQL mode takes a zero date ('0000-00-00 00:00:00') or a date with a
-- zero month or day into a DATETIME column. One waiting row that another producer wrote
-- with such a posting time made every claim that took it fail to decode the row, and the
-- claims were retried for ever: the whole queue stalled behind one row. Such a row is now
-- refused at its INSERT or UPDATE, with an error that names this check
-- (`sk_tasks_queue_posted_at` for the default prefix), and the queue goes on. A not-before
-- time of zero is only compared, never read: such a job runs at once.
-- A row already in the queue that breaks the check fails this migration, which then
-- changes nothing. `IF NOT EXISTS`: a run cut off after the statement is completed by the
-- next (as `ADD COLUMN IF NOT EXISTS` in version 2).
ALTER TABLE __PREFIX__tasks_queue_t
    ADD CONSTRAINT IF NOT EXISTS __PREFIX__tasks_queue_posted_at
    CHECK (MONTH(task_posted_at_ts) <> 0 AND DAYOFMONTH(task_posted_at_ts) <> 0);
