-- sk schema, version 14 (PostgreSQL): seed 001's queue allows a NULL `task_priority`.
-- The claim orders by `task_priority` ascending, as the seed's dequeue does, so such a job
-- comes after every job with a priority (PostgreSQL sorts NULL last); sk reads it, and
-- records it in the results table (where the seed's column is NOT NULL), as 2147483647,
-- the last integer. A producer that leaves the column out still gets 0.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t ALTER COLUMN task_priority DROP NOT NULL;
