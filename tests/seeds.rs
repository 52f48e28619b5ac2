//! The seeds' own contracts, tried as code written from the seed documents alone would:
//! a Stakhanovise.NET producer (a plain INSERT of the seed's columns and a NOTIFY) and a
//! consumer of `sk_try_dequeue_task`, on sk's tables. A module of the `queue` test binary.

use std::time::{Duration, Instant};

use sk_runtime::{Job, JobStatus};
use sk_tests::{recv, RunningWorker, TestDb};
use uuid::Uuid;

use super::{probe, worker, Record, T};

mod fields;
mod letter;
mod patterns;
mod periodic;

/// Posts a job the way Stakhanovise.NET does: only the seed's columns, every parameter
/// text-typed as Npgsql sends strings, then the seed's notification.
async fn post_as_seed_producer(db: &TestDb, task_type: &str, payload: Option<&str>) -> Uuid {
    post_as_seed_producer_with_id(db, Uuid::new_v4(), task_type, payload).await
}

/// As [`post_as_seed_producer`], with the id given.
pub(super) async fn post_as_seed_producer_with_id(
    db: &TestDb,
    id: Uuid,
    task_type: &str,
    payload: Option<&str>,
) -> Uuid {
    sqlx::query(
        "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
            task_locked_until_ts)
         VALUES ($1, $2, $3, $4, 0, now())",
    )
    .bind(id)
    .bind(task_type)
    .bind("Stakhanovise.Producer")
    .bind(payload)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("NOTIFY sk_task_queue_item_added")
        .execute(&db.pool)
        .await
        .unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_producer_is_served_and_its_outcomes_recorded() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    // Polling once a minute: only the notification can wake the worker in time.
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .poll_interval(Duration::from_secs(60))
            .data(probe),
    );
    db.wait_worker_up(&w.id).await;
    let mut pickups = Vec::new();
    for i in 0..5 {
        let posted = Instant::now();
        let id =
            post_as_seed_producer(&db, "record", Some(&format!(r#"{{"label":"seed {i}"}}"#))).await;
        let run = recv(&mut rx, "the seed producer's job", T).await;
        pickups.push(posted.elapsed());
        assert_eq!((run.id, run.label), (id, format!("seed {i}")));
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(
            (r.source.as_str(), r.queue.as_str(), r.error_count),
            ("Stakhanovise.Producer", "default", 0)
        );
        assert!(r.finalized_at.is_some() && r.first_attempt_at.is_some());
    }
    pickups.sort();
    assert!(
        pickups[2] < Duration::from_millis(50),
        "median pickup after the notification: {pickups:?}"
    );

    // A job that fails twice, then succeeds: every outcome on record, the last one too.
    let flaky = post_as_seed_producer(&db, "fails_twice", Some("{}")).await;
    let fw = RunningWorker::start(worker(&db, &[FailsTwice::TASK_TYPE]));
    let r = db
        .wait_job(flaky, T, |r| r.status() == JobStatus::Processed)
        .await;
    fw.stop().await;
    assert_eq!((r.error_count, r.attempts().len()), (2, 3));

    // A NULL payload and one that is not JSON: fatal, with the reason on record.
    let null = post_as_seed_producer(&db, "record", None).await;
    let garbage = post_as_seed_producer(&db, "record", Some("<task>not json</task>")).await;
    for (id, reason) in [
        (null, "payload of `record` is NULL"),
        (garbage, "payload of `record` does not deserialize"),
    ] {
        let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        assert!(
            r.last_error_message.as_deref().unwrap().starts_with(reason),
            "{r:?}"
        );
        let seed_error: String =
            sqlx::query_scalar("SELECT task_last_error FROM sk_task_results_t WHERE task_id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert!(seed_error.starts_with("payload: "), "{seed_error}");
    }
    w.stop().await;
    db.drop().await;
}

/// A producer may post a job under the id of one already on record: its queue row says it
/// has no results row, so the completion's plain insert meets the old row and the batch is
/// written again as an upsert. The second outcome is recorded over the first, and the
/// jobs finalized beside it are recorded too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_producer_reposting_a_finished_id_gets_its_new_outcome_recorded() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe.clone()));
    let id = post_as_seed_producer(&db, "record", Some(r#"{"label":"first"}"#)).await;
    assert_eq!(recv(&mut rx, "the first run", T).await.label, "first");
    let first = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    assert_eq!(first.last_worker.as_deref(), Some(w.id.as_str()));
    w.stop().await;

    // The same id again, posted with others, so that one worker finalizes them together.
    post_as_seed_producer_with_id(&db, id, "record", Some(r#"{"label":"again"}"#)).await;
    let mut others = Vec::new();
    for i in 0..20 {
        let label = format!(r#"{{"label":"other {i}"}}"#);
        others.push(post_as_seed_producer(&db, "record", Some(&label)).await);
    }
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    for other in &others {
        let r = db
            .wait_job(*other, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.last_worker.as_deref(), Some(w.id.as_str()));
    }
    let again = db
        .wait_job(id, T, |r| r.last_worker.as_deref() == Some(w.id.as_str()))
        .await;
    assert_eq!(again.status(), JobStatus::Processed);
    assert!(again.finalized_at > first.finalized_at, "{again:?}");
    let mut labels: Vec<String> = Vec::new();
    while let Ok(run) = rx.try_recv() {
        labels.push(run.label);
    }
    assert_eq!(labels.len(), 21, "each job ran once: {labels:?}");
    assert!(labels.contains(&"again".to_owned()), "{labels:?}");
    w.stop().await;
    db.drop().await;
}

/// What `sk_try_dequeue_task` returns: the seed's eight columns.
#[derive(Debug, PartialEq)]
struct Dequeued {
    task_id: Uuid,
    task_lock_handle_id: i64,
    task_type: String,
    task_source: String,
    task_payload: Option<String>,
    task_priority: i32,
    task_posted_at_ts: chrono::DateTime<chrono::Utc>,
    task_locked_until_ts: chrono::DateTime<chrono::Utc>,
}

impl sqlx::FromRow<'_, sqlx::postgres::PgRow> for Dequeued {
    fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        Ok(Dequeued {
            task_id: row.try_get("task_id")?,
            task_lock_handle_id: row.try_get("task_lock_handle_id")?,
            task_type: row.try_get("task_type")?,
            task_source: row.try_get("task_source")?,
            task_payload: row.try_get("task_payload")?,
            task_priority: row.try_get("task_priority")?,
            task_posted_at_ts: row.try_get("task_posted_at_ts")?,
            task_locked_until_ts: row.try_get("task_locked_until_ts")?,
        })
    }
}

async fn dequeue<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    types: &[&str],
    exclude: &[Uuid],
    ref_now: chrono::DateTime<chrono::Utc>,
) -> Option<Dequeued> {
    sqlx::query_as("SELECT * FROM sk_try_dequeue_task($1, $2, $3)")
        .bind(types)
        .bind(exclude)
        .bind(ref_now)
        .fetch_optional(executor)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_dequeue_function_keeps_the_seed_contract() {
    let db = TestDb::new().await;
    let now = chrono::Utc::now();
    let at = |secs: i64| now + chrono::Duration::seconds(secs);
    let mut ids = Vec::new();
    // (type, priority, not-before): the seed orders by priority, not-before, lock handle.
    for (task_type, priority, not_before) in [
        ("a", 5, at(-10)),
        ("b", 1, at(-5)),
        ("a", 1, at(-5)),
        ("b", 1, at(-20)),
        ("a", 0, now),
    ] {
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
                task_locked_until_ts) VALUES ($1, $2, 'seed', '{}', $3, $4)",
        )
        .bind(id)
        .bind(task_type)
        .bind(priority)
        .bind(not_before)
        .execute(&db.pool)
        .await
        .unwrap();
        ids.push(id);
    }
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(proargnames[4:]) FROM pg_proc WHERE proname = 'sk_try_dequeue_task'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        columns,
        [
            "task_id",
            "task_lock_handle_id",
            "task_type",
            "task_source",
            "task_payload",
            "task_priority",
            "task_posted_at_ts",
            "task_locked_until_ts"
        ],
        "the seed's return shape, in the seed's order"
    );

    // Strictly before ref_now: the job whose not-before time is `now` is not due at `now`.
    let first = dequeue(&db.pool, &[], &[], now).await.unwrap();
    assert_eq!(first.task_id, ids[3], "priority 1, older not-before first");
    assert_eq!(
        (
            first.task_type.as_str(),
            first.task_source.as_str(),
            first.task_payload.as_deref()
        ),
        ("b", "seed", Some("{}"))
    );
    // Deleted from the queue; its results row (created here) says processing.
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM sk_tasks_queue_t WHERE task_id = $1")
        .bind(first.task_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(db.job(first.task_id).await.status(), JobStatus::Processing);

    // Exclusion, then the type filter, then FIFO by lock handle among equals.
    let second = dequeue(&db.pool, &["a", "b"], &[ids[2]], now)
        .await
        .unwrap();
    assert_eq!(second.task_id, ids[1]);
    assert_eq!(dequeue(&db.pool, &["c"], &[], now).await, None);
    assert_eq!(
        dequeue(&db.pool, &["a"], &[], now).await.unwrap().task_id,
        ids[2]
    );
    assert_eq!(
        dequeue(&db.pool, &["a"], &[], now).await.unwrap().task_id,
        ids[0]
    );
    assert_eq!(
        dequeue(&db.pool, &[], &[], now).await,
        None,
        "ids[4] is due only after now"
    );
    assert_eq!(
        dequeue(&db.pool, &[], &[], at(1)).await.unwrap().task_id,
        ids[4]
    );
    db.drop().await;
}

/// The seed's dequeue answers NULL filters as its SQL does (`= ANY(NULL)` is NULL: no
/// row), and a queue an operator paused gives a seed consumer nothing until it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_dequeue_takes_nothing_for_null_filters_or_from_a_paused_queue() {
    let db = TestDb::new().await;
    let paused = Record::new("held".into())
        .with_queue("held")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let open = Record::new("open".into()).enqueue(&db.pool).await.unwrap();
    let now = chrono::Utc::now() + chrono::Duration::seconds(1);
    let call = |types: Option<Vec<&'static str>>, exclude: Option<Vec<Uuid>>| {
        let pool = db.pool.clone();
        async move {
            let row: Option<Dequeued> =
                sqlx::query_as("SELECT * FROM sk_try_dequeue_task($1, $2, $3)")
                    .bind(types)
                    .bind(exclude)
                    .bind(now)
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
            row.map(|r| r.task_id)
        }
    };
    assert_eq!(call(None, Some(vec![])).await, None, "NULL types: no row");
    assert_eq!(
        call(Some(vec![]), None).await,
        None,
        "NULL exclusions: no row"
    );
    let client = sk_runtime::Client::new(db.pool.clone());
    assert!(client.pause("held").await.unwrap());
    assert_eq!(call(Some(vec![]), Some(vec![])).await, Some(open));
    assert_eq!(
        call(Some(vec![]), Some(vec![])).await,
        None,
        "the paused queue's job is held"
    );
    assert!(client.resume("held").await.unwrap());
    assert_eq!(call(Some(vec!["record"]), Some(vec![])).await, Some(paused));
    db.drop().await;
}

/// A seed consumer records a failure the seed's way, in `task_last_error`; every read
/// path shows it as the job's error: the record, the job list and the error groups (and
/// so the CLI and the dashboard, which read through them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_consumers_error_is_the_jobs_error_in_every_read() {
    let db = TestDb::new().await;
    let id = Record::new("x".into()).enqueue(&db.pool).await.unwrap();
    let now = chrono::Utc::now() + chrono::Duration::seconds(1);
    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        dequeue(&mut *tx, &["record"], &[], now)
            .await
            .unwrap()
            .task_id,
        id
    );
    sqlx::query(
        "UPDATE sk_task_results_t SET task_status = 6, task_error_count = 1,
            task_last_error = 'gateway down (HTTP 502)', task_processing_finalized_at_ts = $2
         WHERE task_id = $1",
    )
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let message = Some("gateway down (HTTP 502)");
    let record = db.job(id).await;
    assert_eq!(
        (record.status(), record.last_error_message.as_deref()),
        (JobStatus::Fatal, message)
    );
    let client = sk_runtime::Client::new(db.pool.clone());
    let page = client
        .jobs(&sk_runtime::JobFilter::new(), None, 10)
        .await
        .unwrap();
    assert_eq!(page.jobs[0].last_error_message.as_deref(), message);
    let groups = client
        .error_groups(now - chrono::Duration::hours(1), 10)
        .await
        .unwrap();
    assert_eq!(
        groups
            .iter()
            .map(|g| (g.count, g.message.as_deref(), g.sample))
            .collect::<Vec<_>>(),
        [(1, message, id)]
    );
    db.drop().await;
}

/// A seed-000 producer draws its lock handle from seed 000's sequence by name, a seed-001
/// producer (and sk) from seed 001's: the handles never meet (the UNIQUE constraint would
/// refuse the insert), and each name's grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_seeds_sequence_names_give_unique_growing_handles() {
    let db = TestDb::new().await;
    let mut posted = Vec::new();
    for (i, sequence) in [
        "sk_processing_queues_task_lock_handle_id_seq",
        "sk_tasks_queue_t_task_lock_handle_id_seq",
        "sk_processing_queues_task_lock_handle_id_seq",
    ]
    .into_iter()
    .enumerate()
    {
        let id = Uuid::new_v4();
        let handle: i64 = sqlx::query_scalar(&format!(
            "INSERT INTO sk_tasks_queue_t (task_id, task_lock_handle_id, task_type, task_source,
                task_payload, task_priority, task_posted_at_ts, task_locked_until_ts)
             VALUES ($1, nextval('public.{sequence}'::regclass), 'record', 'seed 000',
                '{{\"label\": \"{i}\"}}', 0, now(), now())
             RETURNING task_lock_handle_id"
        ))
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        posted.push((handle, id));
    }
    let by_default = Record::new("sk".into()).enqueue(&db.pool).await.unwrap();
    let handle: i64 =
        sqlx::query_scalar("SELECT task_lock_handle_id FROM sk_tasks_queue_t WHERE task_id = $1")
            .bind(by_default)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    posted.push((handle, by_default));
    let handles: Vec<i64> = posted.iter().map(|(h, _)| *h).collect();
    assert!(
        handles[0] < handles[2] && handles[1] < handles[3],
        "each name's handles grow: {handles:?}"
    );
    assert_eq!(
        handles.iter().map(|h| h % 2).collect::<Vec<_>>(),
        [0, 1, 0, 1],
        "seed 000's even, seed 001's (the default) odd"
    );
    db.drop().await;
}

/// Seed 001's queue allows a NULL priority: such a job is taken after every job with a
/// priority (PostgreSQL sorts NULL last, as the seed's `ORDER BY task_priority` does), by
/// sk's claim and by the seed's dequeue alike; sk reads and records it as the last integer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_priority_is_taken_last_and_read_as_the_last_integer() {
    let db = TestDb::new().await;
    let past = chrono::Utc::now() - chrono::Duration::seconds(10);
    let mut ids = Vec::new();
    // Posted first, the NULL one; then priorities 5 and 0, later.
    for (i, priority) in [None, Some(5), Some(0), None].into_iter().enumerate() {
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
                task_locked_until_ts) VALUES ($1, 'record', 'seed 001', $2, $3, $4)",
        )
        .bind(id)
        .bind(format!("{{\"label\": \"{i}\"}}"))
        .bind(priority)
        .bind(past + chrono::Duration::seconds(i as i64))
        .execute(&db.pool)
        .await
        .unwrap();
        ids.push(id);
    }
    let client = sk_runtime::Client::new(db.pool.clone());
    let peeked: Vec<(Uuid, i32)> = client
        .peek(10)
        .await
        .unwrap()
        .iter()
        .map(|j| (j.id, j.priority))
        .collect();
    assert_eq!(
        peeked,
        [
            (ids[2], 0),
            (ids[1], 5),
            (ids[0], i32::MAX),
            (ids[3], i32::MAX)
        ]
    );
    assert_eq!(db.job(ids[0]).await.priority, i32::MAX);

    let driver = sk_runtime::__driver::Driver::new(db.pool.clone(), "w1");
    let now = chrono::Utc::now();
    let lease = now + chrono::Duration::seconds(30);
    let mut order = Vec::new();
    for _ in 0..3 {
        let claimed = driver.claim(&["record"], 1, now, lease).await.unwrap();
        order.push((claimed[0].id, claimed[0].priority));
    }
    assert_eq!(
        order,
        [(ids[2], 0), (ids[1], 5), (ids[0], i32::MAX)],
        "the NULL priority last"
    );
    assert_eq!(
        driver.complete(&[(ids[0], 1)], now).await.unwrap(),
        [ids[0]]
    );
    let recorded: i32 =
        sqlx::query_scalar("SELECT task_priority FROM sk_task_results_t WHERE task_id = $1")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(recorded, i32::MAX);
    // The seed's dequeue returns the NULL as it is, and records the job as processing.
    let (id, priority): (Uuid, Option<i32>) =
        sqlx::query_as("SELECT task_id, task_priority FROM sk_try_dequeue_task('{}', '{}', now())")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((id, priority), (ids[3], None));
    assert_eq!(db.job(ids[3]).await.status(), JobStatus::Processing);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_consumer_loop_takes_each_job_once_and_a_rollback_puts_it_back() {
    let db = TestDb::new().await;
    let ids = Record::enqueue_many(&db.pool, (0..20).map(|i| Record::new(i.to_string())))
        .await
        .unwrap();
    let now = chrono::Utc::now() + chrono::Duration::seconds(1);
    // A consumer that crashes mid-work: its transaction rolls back, the job is back.
    let mut tx = db.pool.begin().await.unwrap();
    let crashed = dequeue(&mut *tx, &["record"], &[], now).await.unwrap();
    assert_eq!(crashed.task_id, ids[0]);
    tx.rollback().await.unwrap();

    // Two consumers, each: begin, dequeue, work, commit, until the queue is empty.
    let mut handles = Vec::new();
    for _ in 0..2 {
        let pool = db.pool.clone();
        handles.push(tokio::spawn(async move {
            let mut taken = Vec::new();
            loop {
                let mut tx = pool.begin().await.unwrap();
                let Some(job) = dequeue(&mut *tx, &["record"], &[], now).await else {
                    break;
                };
                sqlx::query("UPDATE sk_task_results_t SET task_status = 3 WHERE task_id = $1")
                    .bind(job.task_id)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                taken.push(job.task_id);
            }
            taken
        }));
    }
    let mut taken = Vec::new();
    for h in handles {
        taken.extend(h.await.unwrap());
    }
    taken.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(
        taken, expected,
        "each job taken exactly once, the rolled-back one too"
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_from_schema_3_keeps_live_and_finished_jobs() {
    let db = TestDb::new().await;
    let v3 = sk_runtime::Schema::new("v3", "sk_").unwrap();
    sk_runtime::__private::migrate_to(&db.pool, &v3, 3)
        .await
        .unwrap();
    let (waiting, retrying, done, fatal) = (
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
    );
    // Rows as sk 0.1 (schema 3) wrote them: jsonb payloads, smallint status, the old
    // names in the stats and metrics tables.
    sqlx::raw_sql(&format!(
        "INSERT INTO v3.sk_task_results_t (task_id, task_type, task_source, task_queue, task_status,
            task_priority, task_posted_at_ts, task_error_count, task_last_error_type,
            task_last_error_message, task_last_error_detail, task_last_error_is_recoverable,
            task_payload, task_processing_finalized_at_ts) VALUES
            ('{waiting}', 'record', 'v3', 'default', 1, 0, now(), 0, NULL, NULL, NULL, NULL, NULL, NULL),
            ('{retrying}', 'record', 'v3', 'default', 4, 0, now(), 1, 'error', 'flaky', NULL, true, NULL, NULL),
            ('{done}', 'record', 'v3', 'default', 3, 0, now(), 0, NULL, NULL, NULL, NULL, NULL, now()),
            ('{fatal}', 'record', 'v3', 'default', 6, 0, now(), 1, 'payload', 'bad', 'line 1', false,
                '{{\"label\": 1}}', now());
         INSERT INTO v3.sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
             task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_attempt) VALUES
            ('{waiting}', 'record', 'v3', '{{\"label\": \"waiting under v3\"}}', 0, now(), now(), 'default', 25, 0),
            ('{retrying}', 'record', 'v3', '{{\"label\": \"retrying under v3\"}}', 0, now(), now(), 'default', 25, 1);
         INSERT INTO v3.sk_task_execution_time_stats_t VALUES ('record', 10, 1, 20, 30, 3, now());
         INSERT INTO v3.sk_metrics_t VALUES ('old-worker', 'jobs_claimed', 'worker', 7, now());"
    ))
    .execute(&db.pool)
    .await
    .unwrap();

    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(v3.clone())
            .data(probe),
    );
    let mut ran = [
        recv(&mut rx, "a job queued under v3", T).await.label,
        recv(&mut rx, "a job queued under v3", T).await.label,
    ];
    ran.sort();
    assert_eq!(ran, ["retrying under v3", "waiting under v3"]);
    let info = sk_runtime::QueueInfo::new(db.pool.clone()).schema(v3.clone());
    for id in [waiting, retrying] {
        sk_tests::wait_until("the v3 job to finish", T, || async {
            let r = info.job(id).await.ok()??;
            (r.status() == JobStatus::Processed).then_some(())
        })
        .await;
    }
    w.stop().await;
    let retried = info.job(retrying).await.unwrap().unwrap();
    assert_eq!(
        (retried.error_count, retried.last_error_message.as_deref()),
        (1, Some("flaky"))
    );
    assert_eq!(
        info.job(done).await.unwrap().unwrap().status(),
        JobStatus::Processed
    );
    let f = info.job(fatal).await.unwrap().unwrap();
    assert_eq!(
        (f.status(), f.payload.as_deref(), f.last_error_recoverable),
        (JobStatus::Fatal, Some(r#"{"label": 1}"#), Some(false))
    );
    let (seed_error, stats, metric): (String, i64, i64) = sqlx::query_as(
        "SELECT (SELECT task_last_error FROM v3.sk_task_results_t WHERE task_id = $1),
                (SELECT et_n_execution_cycles FROM v3.sk_task_execution_time_stats_t
                 WHERE et_payload_type = 'record' AND et_owner_process_id = 'before-v4'),
                (SELECT metric_value FROM v3.sk_metrics_t
                 WHERE metric_owner_process_id = 'old-worker' AND metric_id = 'jobs_claimed')",
    )
    .bind(fatal)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (seed_error.as_str(), stats, metric),
        ("payload: bad\nline 1", 3, 7)
    );
    db.drop().await;
}

/// What `fails_twice` returns when it succeeds.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Receipt {
    attempt: i32,
    note: String,
}

#[sk_runtime::job(max_attempts = 5, backoff = "constant", backoff_base = "1ms")]
async fn fails_twice(ctx: sk_runtime::JobContext) -> Result<Receipt, sk_runtime::JobError> {
    if ctx.attempt() < 3 {
        return Err(
            sk_runtime::JobError::new(format!("failure {}", ctx.attempt()))
                .with_detail("the service said no"),
        );
    }
    Ok(Receipt {
        attempt: ctx.attempt(),
        note: "charged".into(),
    })
}
