//! What differs by backend: schemas and prefixes, SQLite's and MariaDB's checks of the rows they read, their migrations of old queues, SQLite's writer and checkpoints.
//! A module of the `queue` test binary.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_schema_and_a_queue_filter() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let schema = sk_runtime::Schema::new("jobs", "app_").unwrap();
    sk_runtime::migrate(&db.pool, &schema).await.unwrap();
    let enqueue = |label: &str, queue: &str| {
        sk_runtime::Enqueue::new(Record::new(label.into()))
            .with_queue(queue)
            .with_schema(&schema)
            .enqueue(&db.pool)
    };
    let mail = enqueue("mail", "mail").await.unwrap();
    let other = enqueue("other", "reports").await.unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(schema.clone())
            .queues(["mail"])
            .data(probe),
    );
    assert_eq!(recv(&mut rx, "the mail job", T).await.id, mail);
    let info = sk_runtime::QueueInfo::new(db.pool.clone()).schema(schema.clone());
    wait_until("the mail job's result", T, || async {
        info.job(mail)
            .await
            .ok()
            .flatten()
            .filter(|r| r.status() == JobStatus::Processed)
    })
    .await;
    w.stop().await;
    assert_eq!(
        info.job(other).await.unwrap().unwrap().status(),
        JobStatus::Unprocessed,
        "other queues untouched"
    );
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'jobs' AND table_name NOT LIKE 'app_task_results_p%' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "app_audit_t",
            "app_batch_callbacks_t",
            "app_batch_jobs_t",
            "app_batches_t",
            "app_job_stats_t",
            "app_metrics_t",
            "app_queues_t",
            "app_rate_limits_t",
            "app_schedules_t",
            "app_schema_migrations_t",
            "app_task_deps_t",
            "app_task_execution_time_stats_t",
            "app_task_results_default",
            "app_task_results_t",
            "app_task_types_t",
            "app_tasks_queue_t",
            "app_tenant_starts_t",
            "app_workers_t",
            "app_workflow_jobs_t",
            "app_workflows_t"
        ]
    );
    assert!(
        db.info().job(mail).await.unwrap().is_none(),
        "nothing in the default schema"
    );
    db.drop().await;
}

/// SQLite: a schema other than `public` becomes part of the table names (a file has one
/// namespace), and what SQLite cannot do is refused with the reason: it has no schema to
/// archive results into. (Nor stored functions: the seed's `sk_try_dequeue_task` is
/// PostgreSQL's; docs/backends.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schemas_are_name_prefixes_and_an_archive_is_refused() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let schema = sk_runtime::Schema::new("jobs", "app_").unwrap();
    sk_runtime::migrate(&db.pool, &schema).await.unwrap();
    let id = sk_runtime::Enqueue::new(Record::new("prefixed".into()))
        .with_schema(&schema)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(schema.clone())
            .data(probe),
    );
    assert_eq!(recv(&mut rx, "the job", T).await.id, id);
    let info = sk_runtime::QueueInfo::new(db.pool.clone()).schema(schema.clone());
    wait_until("the job's result", T, || async {
        info.job(id)
            .await
            .ok()
            .flatten()
            .filter(|r| r.status() == JobStatus::Processed)
    })
    .await;
    w.stop().await;
    let tables = db
        .texts("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'jobs\\_app\\_%' ESCAPE '\\' ORDER BY 1")
        .await;
    assert_eq!(
        tables,
        [
            "jobs_app_audit_t",
            "jobs_app_batch_callbacks_t",
            "jobs_app_batch_jobs_t",
            "jobs_app_batches_t",
            "jobs_app_job_stats_t",
            "jobs_app_metrics_t",
            "jobs_app_queues_t",
            "jobs_app_rate_limits_t",
            "jobs_app_schedules_t",
            "jobs_app_schema_migrations_t",
            "jobs_app_task_deps_t",
            "jobs_app_task_execution_time_stats_t",
            "jobs_app_task_results_t",
            "jobs_app_task_types_t",
            "jobs_app_tasks_queue_t",
            "jobs_app_tenant_starts_t",
            "jobs_app_workers_t",
            "jobs_app_workflow_jobs_t",
            "jobs_app_workflows_t"
        ]
    );
    assert!(
        db.info().job(id).await.unwrap().is_none(),
        "nothing in the default tables"
    );
    let refused = Worker::builder(db.pool.clone())
        .archive_results_to("old_results")
        .build()
        .err()
        .expect("an archive schema is refused on SQLite");
    assert!(
        refused.to_string().contains("SQLite has no schemas"),
        "{refused}"
    );
    db.drop().await;
}

/// The next two jobs the probe saw run, as (id, label), sorted by id then label.
async fn two_runs(rx: &mut mpsc::UnboundedReceiver<Event>) -> [(Uuid, String); 2] {
    let mut ran = [recv(rx, "a job", T).await, recv(rx, "a job", T).await].map(|e| (e.id, e.label));
    ran.sort();
    ran
}

/// A worker on `schema` runs exactly the two jobs `want` (id, label), in any order; then
/// it stops and the database goes.
async fn two_run_on<B: TestBackend>(
    db: Db<B>,
    schema: &sk_runtime::Schema,
    (probe, mut rx): (Probe, mpsc::UnboundedReceiver<Event>),
    want: [(Uuid, &str); 2],
) where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(schema.clone())
            .data(probe),
    );
    let mut want = want.map(|(id, label)| (id, label.to_owned()));
    want.sort();
    assert_eq!(two_runs(&mut rx).await, want);
    w.stop().await;
    db.drop().await;
}

/// A queue row as another producer writes it on SQLite, `$1` to `$5`: id, priority,
/// posting time, not-before time, payload.
const SQLITE_HAND_ROW: &str = "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_payload,
    task_priority, task_posted_at_ts, task_locked_until_ts) VALUES ($1, 'record', $5, $2, $3, $4)";

/// SQLite keeps any value in any column of an ordinary table: one waiting row with a text
/// priority made every claim fail to decode it, for ever, and no job ran after it. The
/// queue table refuses such rows, naming what is wrong, and the queue goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_row_sk_could_not_read_is_refused_on_sqlite() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let now = "2026-11-26T00:00:00.000000Z";
    let payload = r#"{"label": "by hand"}"#;
    let id = || Uuid::now_v7().as_bytes().to_vec();
    // (A number for a text column is stored as its text, which sk can read.)
    let bad: [(&str, sqlx::query::Query<'_, sqlx::Sqlite, _>, &str); 5] = [
        (
            "a text priority",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(id())
                .bind("high")
                .bind(now)
                .bind(now)
                .bind(payload),
            "cannot store TEXT value in INTEGER column sk_tasks_queue_t.task_priority",
        ),
        (
            "an id of 15 bytes",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(vec![7u8; 15])
                .bind(0)
                .bind(now)
                .bind(now)
                .bind(payload),
            "CHECK constraint failed: task_id_is_a_uuid",
        ),
        (
            "an id as text",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(Uuid::now_v7().to_string())
                .bind(0)
                .bind(now)
                .bind(now)
                .bind(payload),
            "cannot store TEXT value in BLOB column sk_tasks_queue_t.task_id",
        ),
        (
            "a posting time that is not a time",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(id())
                .bind(0)
                .bind("yesterday")
                .bind(now)
                .bind(payload),
            "CHECK constraint failed: task_posted_at_ts_is_a_time",
        ),
        (
            "a not-before time in another form",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(id())
                .bind(0)
                .bind(now)
                .bind("2026-11-26 23:00:00")
                .bind(payload),
            "CHECK constraint failed: task_locked_until_ts_is_a_time",
        ),
    ];
    for (what, query, error) in bad {
        let refused = query
            .execute(&db.pool)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what} was stored"));
        assert!(refused.to_string().contains(error), "{what}: {refused}");
    }
    let refused = sqlx::query(
        "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_metadata) VALUES ($1, 'record', 'not json')",
    )
    .bind(Uuid::now_v7())
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("CHECK constraint failed: task_metadata_is_json"),
        "{refused}"
    );
    // A good row by hand, then one changed into a bad one in place: the change is refused.
    let by_hand = Uuid::now_v7();
    sqlx::query(SQLITE_HAND_ROW)
        .bind(by_hand)
        .bind(0)
        .bind(now)
        .bind(now)
        .bind(payload)
        .execute(&db.pool)
        .await
        .unwrap();
    let refused = sqlx::query("UPDATE sk_tasks_queue_t SET task_priority = 'high'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("task_priority"), "{refused}");
    let enqueued = Record::new("enqueued".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let ran = two_runs(&mut rx).await;
    let mut want = [
        (by_hand, "by hand".to_owned()),
        (enqueued, "enqueued".to_owned()),
    ];
    want.sort();
    assert_eq!(ran, want);
    w.stop().await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
            .await,
        Some(0)
    );
    db.drop().await;
}

/// A SQLite claim picks the due rows, then leases those still due in one `UPDATE`: a row
/// another writer leased between the two steps stays that writer's, and the claim goes on
/// to the next due row in the same call, not at the next poll. The other writer is a
/// trigger on the claim's temp table (sk's own name for it), which leases the first job
/// to a thief as the claim picks it and notes when. Without the check the thief's job
/// would run; without the claim's second round the other job would be claimed after the
/// steal, at the next poll, a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_goes_past_rows_another_writer_took_on_sqlite() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let stolen = Record::new("stolen".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let taken = Record::new("taken".into()).enqueue(&db.pool).await.unwrap();
    let handle = db
        .scalar(
            &format!(
                "SELECT task_lock_handle_id FROM sk_tasks_queue_t WHERE hex(task_id) = '{}'",
                stolen.simple().to_string().to_uppercase()
            ),
            None,
        )
        .await
        .expect("the job's lock handle");
    db.execute("CREATE TABLE thefts (at TEXT NOT NULL)").await;
    let thief = format!(
        "CREATE TEMP TABLE IF NOT EXISTS sk_claim (handle INTEGER PRIMARY KEY);
         CREATE TEMP TRIGGER IF NOT EXISTS thief AFTER INSERT ON sk_claim WHEN NEW.handle = {handle}
         BEGIN
            UPDATE sk_tasks_queue_t SET task_locked_by = 'thief',
                task_locked_until_ts = '9999-12-31T23:59:59.999999Z'
            WHERE task_lock_handle_id = NEW.handle;
            INSERT INTO thefts VALUES (strftime('%Y-%m-%dT%H:%M:%f', 'now'));
         END"
    );
    let pool = sqlite_pool_running(&db, thief).await;
    let w = RunningWorker::start(
        Worker::builder(pool.clone())
            .task_types([Record::TASK_TYPE])
            .concurrency(1)
            .prefetch(0)
            .poll_interval(Duration::from_secs(3600))
            .data(probe),
    );
    let ran = recv(&mut rx, "the job not stolen", T).await;
    assert_eq!((ran.id, ran.label.as_str()), (taken, "taken"));
    w.stop().await;
    assert!(rx.try_recv().is_err(), "the stolen job did not run");
    let thefts = db.texts("SELECT at FROM thefts").await;
    assert_eq!(thefts.len(), 1, "one theft: {thefts:?}");
    let stolen_at = chrono::NaiveDateTime::parse_from_str(&thefts[0], "%Y-%m-%dT%H:%M:%S%.f")
        .unwrap()
        .and_utc();
    // The claim's time is read before its first step; the theft's is cut to milliseconds.
    assert!(
        ran.attempted_at < stolen_at + chrono::Duration::milliseconds(1),
        "claimed in the same call as the theft: claimed at {}, stolen at {stolen_at}",
        ran.attempted_at
    );
    let thief_holds = db
        .texts(&format!(
            "SELECT task_locked_by || ' ' || task_attempt FROM sk_tasks_queue_t WHERE task_lock_handle_id = {handle}"
        ))
        .await;
    assert_eq!(thief_holds, ["thief 0"]);
    pool.close().await;
    db.drop().await;
}

/// A SQLite worker checkpoints the WAL itself after its completions, on another
/// connection: the commit that takes the WAL past `wal_autocheckpoint` pages then has
/// little left to copy back while it holds the worker's turn to write. With the automatic
/// checkpoint off everywhere, any checkpoint is the worker's. The WAL index in the `-shm`
/// file says whether one ran: its header's salt (byte 32) changes when the WAL starts
/// over after a full checkpoint, and `nBackfill` (byte 96, after the header's two
/// copies) counts the frames copied back since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_worker_checkpoints_the_wal_beside_its_writes() {
    const JOBS: u32 = 5_000;
    let db = Db::<sqlx::Sqlite>::new().await;
    Counted::enqueue_many(&db.pool, (0..JOBS).map(Counted::new))
        .await
        .unwrap();
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
    let mut shm = db
        .pool
        .connect_options()
        .get_filename()
        .as_os_str()
        .to_owned();
    shm.push("-shm");
    // (salt, frames copied back)
    let index = || {
        let index = std::fs::read(&shm).unwrap();
        let word = |at: usize| u32::from_ne_bytes(index[at..at + 4].try_into().unwrap());
        (word(32), word(96))
    };
    let pool = sqlite_pool_running(&db, "PRAGMA wal_autocheckpoint = 0".into()).await;
    sqlx::query("CREATE TABLE probe (n INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    let (salt, backfilled) = index();
    assert_eq!(backfilled, 0);
    let tally = Tally {
        runs: Arc::default(),
        mine: Arc::default(),
    };
    let w = RunningWorker::start(
        Worker::builder(pool.clone())
            .task_types([Counted::TASK_TYPE])
            .data(tally.clone()),
    );
    wait_until("every job to finish", Duration::from_secs(60), || async {
        let left = db
            .scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
            .await;
        (left == Some(0)).then_some(())
    })
    .await;
    w.stop().await;
    assert_eq!(tally.mine.load(Ordering::Relaxed), u64::from(JOBS));
    wait_until("a checkpoint of the worker's", T, || async {
        let (now, backfilled) = index();
        (now != salt || backfilled > 0).then_some(())
    })
    .await;
    pool.close().await;
    db.drop().await;
}

/// A SQLite queue of version 4 is copied into the checked table with its waiting jobs, and
/// its lock handles go on from its last; a row the new table would refuse fails the
/// migration, which then changes nothing and names the column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_queue_of_version_4_is_brought_forward_with_its_rows() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let runs = probe();
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_sqlite_to(&db.pool, &old, 4)
        .await
        .unwrap();
    let enqueue = |label: &str| {
        sk_runtime::Enqueue::new(Record::new(label.into()))
            .with_schema(&old)
            .enqueue(&db.pool)
    };
    let kept = enqueue("kept").await.unwrap();
    let gone = enqueue("gone").await.unwrap();
    db.execute(&format!(
        "DELETE FROM old_sk_tasks_queue_t WHERE task_id = x'{}'",
        gone.simple()
    ))
    .await;
    let last = "SELECT seq FROM sqlite_sequence WHERE name = 'old_sk_tasks_queue_t'";
    let last_handle = db.scalar(last, None).await.unwrap();

    let bad = sk_runtime::Schema::new("bad", "sk_").unwrap();
    sk_runtime::__private::migrate_sqlite_to(&db.pool, &bad, 4)
        .await
        .unwrap();
    db.execute(&format!(
        "INSERT INTO bad_sk_tasks_queue_t (task_id, task_type, task_priority) VALUES (x'{}', 'record', 'high')",
        Uuid::now_v7().simple()
    ))
    .await;
    let refused = sk_runtime::migrate(&db.pool, &bad).await.unwrap_err();
    assert!(
        matches!(refused, Error::Migration { version: 5, .. })
            && refused.to_string().contains("task_priority"),
        "{refused}"
    );
    let versions = "SELECT max(version) FROM bad_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(4));
    let rows = "SELECT count(*) FROM bad_sk_tasks_queue_t";
    assert_eq!(db.scalar(rows, None).await, Some(1), "the bad row is kept");

    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let versions = "SELECT max(version) FROM old_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(17));
    assert_eq!(db.scalar(last, None).await, Some(last_handle));
    let table = db
        .texts("SELECT sql FROM sqlite_master WHERE name = 'old_sk_tasks_queue_t'")
        .await;
    assert!(table[0].ends_with("STRICT"), "{table:?}");
    let indexes = "SELECT count(*) FROM sqlite_master WHERE tbl_name = 'old_sk_tasks_queue_t'
        AND type IN ('index', 'trigger') AND sql IS NOT NULL";
    // Migration 5's four, migration 7's lookups by retry group and external id, and
    // migration 10's fair claims (partial: jobs with a tenant only).
    assert_eq!(db.scalar(indexes, None).await, Some(7));
    let new = enqueue("new").await.unwrap();
    let handle = db
        .scalar(
            &format!(
                "SELECT task_lock_handle_id FROM old_sk_tasks_queue_t WHERE task_id = x'{}'",
                new.simple()
            ),
            None,
        )
        .await
        .unwrap();
    assert!(handle > last_handle, "{handle} after {last_handle}");
    two_run_on(db, &old, runs, [(kept, "kept"), (new, "new")]).await;
}

/// MariaDB's default SQL mode takes a zero date into a DATETIME column: one waiting row
/// with a zero posting time made every claim fail to decode it, for ever, and no job ran
/// after it. The queue table refuses such rows, and a queue that holds one fails the
/// migration that adds the check, which then changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_row_sk_could_not_read_is_refused_on_mysql() {
    let db = Db::<sqlx::MySql>::new().await;
    let (probe, mut rx) = probe();
    let hand_row = |table: &str, posted_at: &str| {
        format!(
            "INSERT INTO {table} (task_id, task_type, task_payload, task_posted_at_ts)
             VALUES (x'{}', 'record', '{{\"label\": \"by hand\"}}', '{posted_at}')",
            Uuid::now_v7().simple()
        )
    };
    for posted_at in [
        "0000-00-00 00:00:00",
        "2026-00-26 10:00:00",
        "2026-11-00 10:00:00",
    ] {
        let refused = sqlx::query(&hand_row("sk_tasks_queue_t", posted_at))
            .execute(&db.pool)
            .await
            .err()
            .unwrap_or_else(|| panic!("{posted_at} was stored"));
        assert!(
            refused.to_string().contains("sk_tasks_queue_posted_at"),
            "{posted_at}: {refused}"
        );
    }
    db.execute(&hand_row("sk_tasks_queue_t", "2026-11-26 10:00:00"))
        .await;
    let refused = sqlx::query("UPDATE sk_tasks_queue_t SET task_posted_at_ts = '0000-00-00'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("sk_tasks_queue_posted_at"),
        "{refused}"
    );
    Record::new("enqueued".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let mut ran = two_runs(&mut rx).await.map(|(_, label)| label);
    ran.sort();
    assert_eq!(ran, ["by hand", "enqueued"]);
    w.stop().await;

    let older = sk_runtime::Schema::new("public", "older_").unwrap();
    sk_runtime::__private::migrate_mysql_to(&db.pool, &older, 5)
        .await
        .unwrap();
    db.execute(&hand_row("older_tasks_queue_t", "0000-00-00 00:00:00"))
        .await;
    let refused = sk_runtime::migrate(&db.pool, &older).await.unwrap_err();
    assert!(
        matches!(refused, Error::Migration { version: 6, .. }),
        "{refused}"
    );
    let versions = "SELECT max(version) FROM older_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(5));
    let rows = "SELECT count(*) FROM older_tasks_queue_t";
    assert_eq!(db.scalar(rows, None).await, Some(1), "the bad row is kept");
    db.drop().await;
}

/// A MySQL queue of version 6 holds a job its sk posted with both rows (version 5's trigger
/// wrote the results row). Version 7 drops that trigger and the queue's correlation-id
/// index, version 8 three more indexes; the old job and a new one (its queue row alone)
/// are each listed and counted once, and both run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_queue_of_version_6_is_brought_forward_with_its_jobs() {
    let db = Db::<sqlx::MySql>::new().await;
    let runs = probe();
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_mysql_to(&db.pool, &old, 6)
        .await
        .unwrap();
    let posted = Uuid::now_v7();
    db.execute(&format!(
        "INSERT INTO old_sk_tasks_queue_t (task_id, task_type, task_payload, task_has_result)
         VALUES (x'{}', 'record', '{{\"label\": \"posted\"}}', 2)",
        posted.simple()
    ))
    .await;
    let results = "SELECT count(*) FROM old_sk_task_results_t";
    assert_eq!(
        db.scalar(results, None).await,
        Some(1),
        "version 6 wrote both rows"
    );

    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let versions = "SELECT max(version) FROM old_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(19));
    let triggers = "SELECT count(*) FROM information_schema.TRIGGERS
        WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'old_sk_tasks_queue_t'
            AND EVENT_MANIPULATION = 'INSERT'";
    assert_eq!(
        db.scalar(triggers, None).await,
        Some(0),
        "no trigger runs on an insert"
    );
    let indexes = "SELECT count(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'old_sk_tasks_queue_t'";
    assert_eq!(
        db.scalar(indexes, None).await,
        Some(3),
        "the lock handle, the id and the claim order"
    );
    sk_runtime::migrate(&db.pool, &old).await.unwrap();

    let new = sk_runtime::Enqueue::new(Record::new("new".into()))
        .with_schema(&old)
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        db.scalar(results, None).await,
        Some(1),
        "the new job is its queue row"
    );
    let client = sk_runtime::Client::new(db.pool.clone()).schema(old.clone());
    let page = client
        .jobs(&sk_runtime::JobFilter::new(), None, 10)
        .await
        .unwrap();
    let listed: Vec<_> = page.jobs.iter().map(|j| (j.id, j.status())).collect();
    assert_eq!(
        listed,
        [
            (new, JobStatus::Unprocessed),
            (posted, JobStatus::Unprocessed)
        ]
    );
    let counts = sk_runtime::QueueInfo::new(db.pool.clone())
        .schema(old.clone())
        .counts()
        .await
        .unwrap();
    assert_eq!(counts.by_status, [(JobStatus::Unprocessed, 2)]);
    two_run_on(db, &old, runs, [(posted, "posted"), (new, "new")]).await;
}

/// A MySQL queue of version 7 holds a waiting job with a unique key and a leased one.
/// Version 8 moves the key and the lease into tables of their own: the key still refuses
/// a second job (mode skip) and stays with its job through a retry's update, the lease
/// is counted for the queue's limit (and, from version 14, its tenant's), and both go
/// when their jobs leave the queue (the table's triggers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_queue_of_version_7_keeps_its_keys_and_leases() {
    let db = Db::<sqlx::MySql>::new().await;
    let old = sk_runtime::Schema::new("seven", "sk_").unwrap();
    sk_runtime::__private::migrate_mysql_to(&db.pool, &old, 7)
        .await
        .unwrap();
    let (keyed, leased) = (Uuid::now_v7(), Uuid::now_v7());
    db.execute(&format!(
        "INSERT INTO seven_sk_tasks_queue_t (task_id, task_type, task_payload, task_unique_key,
            task_unique_mode, task_queue, task_locked_until_ts, task_locked_by, task_tenant)
         VALUES (x'{}', 'record', '{{\"label\": \"keyed\"}}', 'doc:7', 1, 'default',
                UTC_TIMESTAMP(6), NULL, NULL),
            (x'{}', 'record', '{{\"label\": \"leased\"}}', NULL, NULL, 'limited',
                UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 'gone-worker', 'acme')",
        keyed.simple(),
        leased.simple()
    ))
    .await;
    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let running = "SELECT count(*) FROM seven_sk_running_t WHERE task_queue = 'limited'";
    assert_eq!(
        db.scalar(running, None).await,
        Some(1),
        "the lease is counted"
    );
    // Version 14 counts it for its tenant too (a limit of running jobs per tenant).
    let acme = "SELECT count(*) FROM seven_sk_running_t WHERE task_tenant = 'acme'";
    assert_eq!(
        db.scalar(acme, None).await,
        Some(1),
        "the lease is its tenant's"
    );
    let post = |label: &str| {
        sk_runtime::Enqueue::new(Record::new(label.into()))
            .with_unique_key("doc:7")
            .with_schema(&old)
            .enqueue(&db.pool)
    };
    assert_eq!(
        post("again").await.unwrap(),
        keyed,
        "the live job keeps its key"
    );

    // A lease given back leaves the count; the job's delete takes its key with it.
    db.execute("UPDATE seven_sk_tasks_queue_t SET task_locked_by = NULL")
        .await;
    assert_eq!(db.scalar(running, None).await, Some(0));
    db.execute("DELETE FROM seven_sk_tasks_queue_t").await;
    let keys = "SELECT count(*) FROM seven_sk_unique_keys_t";
    assert_eq!(db.scalar(keys, None).await, Some(0));
    let fresh = post("fresh").await.unwrap();
    assert_ne!(fresh, keyed, "a free key goes to the new job");
    assert_eq!(db.scalar(keys, None).await, Some(1));
    db.drop().await;
}

/// MariaDB's `utf8mb4_bin` pads: `"k"` and `"k "` are one unique key, as they were to the
/// queue table's unique index before migration 8. Every enqueue path gives the job that
/// holds it.
#[tokio::test]
async fn a_mysql_unique_key_compares_as_its_column_does() {
    let db = Db::<sqlx::MySql>::new().await;
    let post = |key: &str| {
        sk_runtime::Enqueue::new(Record::new(key.into()))
            .with_unique_key(key)
            .run_after(std::time::Duration::from_secs(3600))
    };
    let first = post("k").enqueue(&db.pool).await.unwrap();
    assert_eq!(post("k ").enqueue(&db.pool).await.unwrap(), first);
    let many =
        sk_runtime::Enqueue::enqueue_many(&db.pool, vec![post("k  "), post("j"), post("j ")])
            .await
            .unwrap();
    assert_eq!(many[0], first);
    assert_eq!(
        many[2], many[1],
        "the batch's first job with the key holds it"
    );
    db.drop().await;
}
