//! Seed 002's time partitions: the results table is range-partitioned by the UUIDv7 job id,
//! retention retires whole partitions (dropped or archived) and never a live job's row.
//! A module of the `queue` test binary.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sk_runtime::{Clock, Job, JobStatus, ManualClock, Worker, WorkerBuilder};
use sk_tests::{wait_until, Db, RunningWorker, TestDb};
use uuid::Uuid;

use super::{probe, Record, T};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The range partitions of the results table, by name.
async fn partitions(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'sk_task_results_t'::regclass AND c.relname <> 'sk_task_results_default'
         ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// The partition that holds a job's results row.
async fn partition_of(db: &TestDb, id: Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM sk_task_results_t WHERE task_id = $1")
        .bind(id)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

/// Rows deleted from, and dead rows in, the results partitions whose names are given.
async fn deletes(db: &TestDb, tables: &[String]) -> (i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(sum(n_tup_del), 0)::int8, coalesce(sum(n_dead_tup), 0)::int8
         FROM pg_stat_user_tables WHERE relname = ANY($1)",
    )
    .bind(tables)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// A worker on its own named pool (so the test can wait for its statistics), on `clock`,
/// doing its upkeep every 100 ms.
async fn worker_on(db: &TestDb, name: &str, clock: &ManualClock, types: &[&str]) -> WorkerBuilder {
    Worker::builder(db.named_pool(name, 10).await)
        .task_types(types.iter().copied())
        .poll_interval(Duration::from_millis(50))
        .clock(clock.clone())
        .maintenance_interval(Duration::from_millis(100))
        // The retries land exactly where the clock is moved.
        .retry_jitter(0.0)
}

/// Waits for an upkeep pass of worker `id` at or after `at`: the pass retires partitions,
/// then stamps the metrics with the clock.
async fn wait_upkeep(db: &TestDb, id: &str, at: DateTime<Utc>) {
    wait_until("a maintenance pass at the advanced clock", T, || async {
        let stamp: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT max(metric_last_updated) FROM sk_metrics_t WHERE metric_owner_process_id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (stamp >= Some(at)).then_some(())
    })
    .await;
}

/// Posts a `record` job with `id` as a seed producer does (a UUIDv4 is what one makes).
async fn post_foreign(db: &TestDb, id: Uuid, label: &str) -> Uuid {
    let payload = format!(r#"{{"label":"{label}"}}"#);
    super::seeds::post_as_seed_producer_with_id(db, id, "record", Some(&payload)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_whole_partitions_and_prunes_foreign_ids_by_rows() {
    let db = TestDb::new().await;
    // Migrating created today's partition and the next two days'.
    let created = partitions(&db).await;
    assert_eq!(created.len(), 3, "{created:?}");
    // A second ahead: jobs enqueued from here on are due on its clock.
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(
            Record::new(format!("job {i}"))
                .enqueue(&db.pool)
                .await
                .unwrap(),
        );
    }
    let foreign = post_foreign(&db, Uuid::new_v4(), "foreign").await;
    let (probe_1, _rx) = probe();
    let w = RunningWorker::start(
        worker_on(&db, "sk-partitions-1", &clock, &[Record::TASK_TYPE])
            .await
            .data(probe_1),
    );
    for id in ids.iter().chain([&foreign]) {
        db.wait_job(*id, T, |r| r.status() == JobStatus::Processed)
            .await;
    }
    w.stop().await;
    let today = partition_of(&db, ids[0]).await.unwrap();
    assert!(created.contains(&today), "{today} is a range partition");
    for id in &ids {
        assert_eq!(partition_of(&db, *id).await.as_ref(), Some(&today));
    }
    assert_eq!(
        partition_of(&db, foreign).await.as_deref(),
        Some("sk_task_results_default"),
        "an id that is not UUIDv7 lands in the default partition"
    );
    db.wait_disconnected("sk-partitions-1").await;
    let ranges_before = partitions(&db).await;
    let (deleted_before, dead_before) = deletes(&db, &ranges_before).await;
    let (default_deleted_before, _) = deletes(&db, &["sk_task_results_default".into()]).await;

    // Nine days on (retention 7 days): today's partition goes whole.
    clock.advance(DAY * 9);
    let (probe, _rx) = probe();
    let w = RunningWorker::start(
        worker_on(&db, "sk-partitions-2", &clock, &[Record::TASK_TYPE])
            .await
            .data(probe),
    );
    wait_upkeep(&db, &w.id, clock.now()).await;
    w.stop().await;
    let ranges_after = partitions(&db).await;
    assert!(!ranges_after.contains(&today), "{today} was dropped");
    assert!(
        ranges_after.len() >= 3,
        "partitions for the advanced clock: {ranges_after:?}"
    );
    for id in ids.iter().chain([&foreign]) {
        assert_eq!(partition_of(&db, *id).await, None, "{id} was pruned");
    }
    db.wait_disconnected("sk-partitions-2").await;
    let survivors: Vec<String> = ranges_before
        .iter()
        .filter(|p| ranges_after.contains(p))
        .cloned()
        .collect();
    let (deleted_survivors_before, dead_survivors_before) = deletes(&db, &survivors).await;
    let (deleted_after, dead_after) = deletes(&db, &ranges_after).await;
    assert_eq!(
        (deleted_after, dead_after),
        (deleted_survivors_before, dead_survivors_before),
        "pruning deleted no row in the range partitions (before, all: {deleted_before} deleted, \
         {dead_before} dead)"
    );
    let (default_deleted_after, _) = deletes(&db, &["sk_task_results_default".into()]).await;
    assert_eq!(
        default_deleted_after - default_deleted_before,
        1,
        "the foreign job's row was pruned by itself"
    );
    db.drop().await;
}

#[sk_runtime::job(max_attempts = 3, backoff = "constant", backoff_base = "8days")]
async fn slow_retry(ctx: sk_runtime::JobContext) -> Result<(), sk_runtime::JobError> {
    if ctx.attempt() == 1 {
        return Err(sk_runtime::JobError::new("the partner is down for a week"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_retrying_past_its_partition_is_not_lost() {
    let db = TestDb::new().await;
    // A second ahead: jobs enqueued from here on are due on its clock.
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let retrying = SlowRetry::new().enqueue(&db.pool).await.unwrap();
    let done = Record::new("done".into()).enqueue(&db.pool).await.unwrap();
    let (probe, _rx) = probe();
    let w = RunningWorker::start(
        worker_on(
            &db,
            "sk-retry",
            &clock,
            &[SlowRetry::TASK_TYPE, Record::TASK_TYPE],
        )
        .await
        .data(probe),
    );
    db.wait_job(retrying, T, |r| r.error_count == 1).await;
    db.wait_job(done, T, |r| r.status() == JobStatus::Processed)
        .await;
    // Its results row, written at its first outcome, is in its posting day's partition.
    let partition = partition_of(&db, retrying).await.unwrap();

    // Past the retention, with the retry due: the partition stays for the live job, and
    // only the finished job's row goes.
    clock.advance(DAY * 8 + Duration::from_secs(3600));
    wait_upkeep(&db, &w.id, clock.now()).await;
    assert!(partitions(&db).await.contains(&partition));
    assert!(db.info().job(done).await.unwrap().is_none(), "done pruned");
    let r = db
        .wait_job(retrying, T, |r| r.status() == JobStatus::Processed)
        .await;
    assert_eq!(
        (r.error_count, r.attempts().len()),
        (1, 2),
        "the retried job and its failed attempt are on record"
    );
    // Finished only now, it is kept for the retention from now: the partition too.
    clock.advance(Duration::from_secs(3600));
    wait_upkeep(&db, &w.id, clock.now()).await;
    assert!(partitions(&db).await.contains(&partition));
    assert!(db.info().job(retrying).await.unwrap().is_some());
    // A retention after it finished, the partition goes.
    clock.advance(DAY * 7 + Duration::from_secs(3600));
    let cleared = clock.now();
    wait_until("the partition to be dropped", T, || async {
        (!partitions(&db).await.contains(&partition)).then_some(())
    })
    .await;
    wait_upkeep(&db, &w.id, cleared).await;
    assert!(db.info().job(retrying).await.unwrap().is_none());
    w.stop().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retired_partitions_can_be_archived() {
    let db = TestDb::new().await;
    // A second ahead: jobs enqueued from here on are due on its clock.
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let id = Record::new("archived".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (probe, _rx) = probe();
    let w = RunningWorker::start(
        worker_on(&db, "sk-archive", &clock, &[Record::TASK_TYPE])
            .await
            .archive_results_to("sk_archive")
            .data(probe),
    );
    db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let partition = partition_of(&db, id).await.unwrap();
    clock.advance(DAY * 9);
    wait_upkeep(&db, &w.id, clock.now()).await;
    w.stop().await;
    assert!(!partitions(&db).await.contains(&partition));
    let archived: (i32, String) = sqlx::query_as(&format!(
        "SELECT task_status, task_type FROM sk_archive.{partition} WHERE task_id = $1"
    ))
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(archived, (3, "record".to_owned()));
    assert!(
        Worker::builder(db.pool.clone())
            .archive_results_to("Bad Name")
            .build()
            .is_err()
            && Worker::builder(db.pool.clone())
                .results_partition(Duration::from_secs(60))
                .build()
                .is_err(),
        "bad archive schema and partition span are refused"
    );
    db.drop().await;
}

/// The smallest UUIDv7 of a millisecond: the bound sk gives its partitions.
fn id_floor(at: DateTime<Utc>) -> Uuid {
    let millis = u64::try_from(at.timestamp_millis()).unwrap();
    let mut bytes = [0; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    Uuid::from_bytes(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_into_a_partition_dropped_since_it_was_read_goes_through_the_parent() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    // A partition a month ahead, and the last of the three migrate made gone: the
    // worker's first upkeep makes that one again, then reads the partitions.
    let month = (Utc::now() + chrono::Duration::days(30))
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let ahead = format!("sk_task_results_p{}", month.format("%Y%m%d_%H%M"));
    sqlx::query(&format!(
        "CREATE TABLE {ahead} PARTITION OF sk_task_results_t FOR VALUES FROM ('{}') TO ('{}')",
        id_floor(month),
        id_floor(month + chrono::Duration::days(1))
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let made = partitions(&db).await;
    let last_made = made.iter().rfind(|p| **p != ahead).unwrap().clone();
    sqlx::query(&format!("DROP TABLE {last_made}"))
        .execute(&db.pool)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker_on(&db, "sk-dropped", &clock, &[Record::TASK_TYPE])
            .await
            .maintenance_interval(Duration::from_secs(3600))
            // Migrating would make the partition again before the upkeep does.
            .auto_migrate(false)
            .data(probe),
    );
    wait_until("the first upkeep", T, || async {
        partitions(&db).await.contains(&last_made).then_some(())
    })
    .await;
    // Gone after the worker read it: a job posted elsewhere with an id of its span
    // completes through a statement naming it, then through the partitioned table.
    sqlx::query(&format!("DROP TABLE {ahead}"))
        .execute(&db.pool)
        .await
        .unwrap();
    let in_span = uuid::Builder::from_unix_timestamp_millis(
        u64::try_from((month + chrono::Duration::hours(1)).timestamp_millis()).unwrap(),
        &[1; 10],
    )
    .into_uuid();
    post_foreign(&db, in_span, "late").await;
    assert_eq!(sk_tests::recv(&mut rx, "the job", T).await.id, in_span);
    db.wait_job(in_span, T, |r| r.status() == JobStatus::Processed)
        .await;
    assert_eq!(
        partition_of(&db, in_span).await.as_deref(),
        Some("sk_task_results_default")
    );
    w.stop().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_shorter_than_a_partition_prunes_rows_within_it() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let old = Record::new("old".into()).enqueue(&db.pool).await.unwrap();
    let (probe, _rx) = probe();
    let w = RunningWorker::start(
        worker_on(&db, "sk-short", &clock, &[Record::TASK_TYPE])
            .await
            .result_retention(Duration::from_secs(600))
            .data(probe),
    );
    db.wait_job(old, T, |r| r.status() == JobStatus::Processed)
        .await;
    let partition = partition_of(&db, old).await.unwrap();
    // Twenty minutes on, with a retention of ten and partitions of a day: the old result
    // goes by itself; one finished since stays, and so does the partition.
    clock.advance(Duration::from_secs(1200));
    let recent = Record::new("recent".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    db.wait_job(recent, T, |r| r.status() == JobStatus::Processed)
        .await;
    wait_upkeep(&db, &w.id, clock.now()).await;
    w.stop().await;
    assert_eq!(partition_of(&db, old).await, None, "pruned by its row");
    assert!(partition_of(&db, recent).await.is_some());
    assert!(partitions(&db).await.contains(&partition));
    db.drop().await;
}

/// The results partition of MySQL's table that holds `id`, if any.
async fn mysql_partition_of(db: &Db<sqlx::MySql>, id: Uuid) -> Option<String> {
    for name in mysql_partitions(db).await {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM sk_task_results_t PARTITION ({name}) WHERE task_id = ?"
        ))
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if n > 0 {
            return Some(name);
        }
    }
    None
}

async fn mysql_partitions(db: &Db<sqlx::MySql>) -> Vec<String> {
    db.texts(
        "SELECT PARTITION_NAME FROM information_schema.PARTITIONS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'sk_task_results_t' ORDER BY PARTITION_ORDINAL_POSITION",
    )
    .await
}

/// MySQL/MariaDB (seed 002): maintenance splits `p_future` into daily partitions (the rows
/// posted before it ran move in), retention keeps a partition while a job in it is live
/// (pruning the finished rows), then retires it whole into the archive database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_retention_retires_whole_partitions_and_never_a_live_jobs() {
    let db = Db::<sqlx::MySql>::new().await;
    assert_eq!(mysql_partitions(&db).await, ["p_future"]);
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let retrying = SlowRetry::new().enqueue(&db.pool).await.unwrap();
    let done = Record::new("done".into()).enqueue(&db.pool).await.unwrap();
    let archive = format!("ska_{}", &Uuid::new_v4().simple().to_string()[..12]);
    let (probe, _rx) = probe();
    let w = RunningWorker::start(
        Worker::builder(db.pool.clone())
            .task_types([SlowRetry::TASK_TYPE, Record::TASK_TYPE])
            .poll_interval(Duration::from_millis(50))
            .clock(clock.clone())
            .maintenance_interval(Duration::from_millis(100))
            .retry_jitter(0.0)
            .archive_results_to(&archive)
            .data(probe),
    );
    db.wait_job(retrying, T, |r| r.error_count == 1).await;
    db.wait_job(done, T, |r| r.status() == JobStatus::Processed)
        .await;
    let wait_upkeep = |at: DateTime<Utc>| {
        let (db, id) = (&db, w.id.clone());
        async move {
            wait_until("a maintenance pass at the advanced clock", T, || async {
                let stamp = db
                    .time(
                        "SELECT max(metric_last_updated) FROM sk_metrics_t WHERE metric_owner_process_id = $1",
                        Some(&id),
                    )
                    .await;
                (stamp >= Some(at)).then_some(())
            })
            .await;
        }
    };
    wait_upkeep(clock.now()).await;
    // A pass whose partition DDL did not get the table's metadata lock in time
    // (`lock_wait_timeout`, 2 s) tries again at the next one: wait for the split.
    let partition = wait_until("the job's row in a day's partition", T, || async {
        mysql_partition_of(&db, retrying)
            .await
            .filter(|p| p.starts_with("p2"))
    })
    .await;
    assert_eq!(
        mysql_partition_of(&db, done).await.as_ref(),
        Some(&partition)
    );
    assert_eq!(
        mysql_partitions(&db).await.len(),
        5,
        "p_before, today and two days ahead, p_future"
    );

    // Past the retention, with the retry due: the partition stays for the live job, and
    // only the finished job's row goes.
    clock.advance(DAY * 8 + Duration::from_secs(3600));
    wait_upkeep(clock.now()).await;
    assert!(mysql_partitions(&db).await.contains(&partition));
    assert!(db.info().job(done).await.unwrap().is_none(), "done pruned");
    let r = db
        .wait_job(retrying, T, |r| r.status() == JobStatus::Processed)
        .await;
    assert_eq!((r.error_count, r.attempts().len()), (1, 2));
    // A retention after it finished, the partition goes whole, into the archive.
    clock.advance(DAY * 7 + Duration::from_secs(3600));
    wait_until("the partition to be retired", T, || async {
        (!mysql_partitions(&db).await.contains(&partition)).then_some(())
    })
    .await;
    w.stop().await;
    assert!(db.info().job(retrying).await.unwrap().is_none());
    let rows: Vec<(i32, Vec<u8>)> = sqlx::query_as(&format!(
        "SELECT task_status, task_type FROM {archive}.sk_task_results_{partition} WHERE task_id = ?"
    ))
    .bind(retrying)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, [(3, b"slow_retry".to_vec())]);
    db.execute(&format!("DROP DATABASE {archive}")).await;
    db.drop().await;
}

/// Seed 002's weeks start on Monday: weekly partitions are cut from Monday 00:00 UTC (not
/// from the epoch's Thursday), or from the day `results_week_start` names, on PostgreSQL
/// and on MariaDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weekly_partitions_start_on_monday_or_the_day_asked() {
    let at = |s: &str| -> DateTime<Utc> { s.parse().unwrap() };
    let db = TestDb::new().await;
    for (now, week_start, first) in [
        (
            "2027-03-03T12:00:00Z",
            None,
            "sk_task_results_p20270301_0000",
        ),
        (
            "2027-06-02T12:00:00Z",
            Some(chrono::Weekday::Sun),
            "sk_task_results_p20270530_0000",
        ),
    ] {
        let clock = ManualClock::new(at(now));
        let mut builder = worker_on(&db, "weekly", &clock, &[Record::TASK_TYPE])
            .await
            .results_partition(7 * DAY);
        if let Some(day) = week_start {
            builder = builder.results_week_start(day);
        }
        let w = RunningWorker::start(builder.data(probe().0));
        wait_until("the week's partition", T, || async {
            partitions(&db)
                .await
                .contains(&first.to_owned())
                .then_some(())
        })
        .await;
        w.stop().await;
    }
    db.drop().await;

    let db = Db::<sqlx::MySql>::new().await;
    let clock = ManualClock::new(at("2027-03-03T12:00:00Z"));
    let w = RunningWorker::start(
        Worker::builder(db.pool.clone())
            .task_types([Record::TASK_TYPE])
            .poll_interval(Duration::from_millis(50))
            .clock(clock.clone())
            .maintenance_interval(Duration::from_millis(100))
            .results_partition(7 * DAY)
            .data(probe().0),
    );
    // A pass whose DDL did not get the metadata lock in time tries again at the next.
    wait_until("the week's partition", T, || async {
        mysql_partitions(&db)
            .await
            .contains(&"p20270301_0000".to_owned())
            .then_some(())
    })
    .await;
    let names = mysql_partitions(&db).await;
    assert_eq!(
        names,
        [
            "p_before",
            "p20270301_0000",
            "p20270308_0000",
            "p20270315_0000",
            "p_future"
        ],
        "weeks from Monday"
    );
    w.stop().await;
    db.drop().await;
}
