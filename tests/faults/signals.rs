//! Signals: a worker stopped past its lease and resumed, SIGTERM with its grace
//! period, a second SIGTERM.

use super::*;

on_backends! {
    /// A worker stopped (SIGSTOP) in the middle of a job past its lease: another takes the
    /// job over and finishes it; the first, resumed, has its late result fenced.
    fn a_stale_worker_resumed_after_its_lease_is_fenced => stale_worker_on [postgres, mysql]
}

async fn stale_worker_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    let (db, ids) = setup::<B>(1, 1500).await;
    let id = ids[0];
    let mut a = Proc::spawn(
        &db.url,
        "stale-a",
        &["--concurrency", "1", "--lease-ms", "600", "--poll-ms", "50"],
    );
    wait_runs_started(&db, 1, "worker A to start the job").await;
    a.signal("STOP");
    let stopped_at = Utc::now();
    let mut b = Proc::spawn(
        &db.url,
        "stale-b",
        &["--concurrency", "4", "--lease-ms", "600", "--poll-ms", "50"],
    );
    let r = db
        .wait_job(id, Duration::from_secs(30), |r| {
            r.status() == JobStatus::Processed
        })
        .await;
    a.signal("CONT");
    // A wakes with its sleep over, tries to finalize, and is refused.
    wait_until(
        "worker A's refused result",
        Duration::from_secs(30),
        || async {
            a.log_text()
                .contains("result refused: this worker no longer holds the job's lease")
                .then_some(())
        },
    )
    .await;
    for w in [&mut a, &mut b] {
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    }
    let fenced = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = 'stale-a' AND metric_id = 'jobs_fenced'",
            None,
        )
        .await;
    assert_eq!(fenced, Some(1));
    let b_started = db
        .time("SELECT started_at FROM fault_runs WHERE attempt = 2", None)
        .await
        .expect("B's run");
    let takeover = (b_started - stopped_at).as_seconds_f64();
    let runs = (
        db.scalar("SELECT count(*) FROM fault_runs", None).await,
        db.scalar(
            "SELECT CAST(pid AS BIGINT) FROM fault_runs WHERE attempt = 1",
            None,
        )
        .await,
        db.scalar(
            "SELECT CAST(pid AS BIGINT) FROM fault_runs WHERE attempt = 2",
            None,
        )
        .await,
    );
    assert_eq!(
        runs,
        (Some(2), Some(i64::from(a.pid())), Some(i64::from(b.pid())))
    );
    // A's attempt is on record as lost (one error); B's result is the job's.
    let after = db.job(id).await;
    assert_eq!(
        (after.status(), after.finalized_at, after.error_count),
        (JobStatus::Processed, r.finalized_at, 1)
    );
    assert_eq!(
        after
            .attempts()
            .iter()
            .map(|a| (a.attempt, a.outcome, a.worker.as_deref()))
            .collect::<Vec<_>>(),
        [
            (1, sk_runtime::AttemptOutcome::Lost, Some("stale-a")),
            (2, sk_runtime::AttemptOutcome::Processed, Some("stale-b")),
        ]
    );
    assert_each_job_finished_once(&db, &ids).await;
    assert!(
        takeover >= 0.6 * 2.0 / 3.0 - 0.05,
        "B took over before A's lease ran out: {takeover:.2} s"
    );
    report(&format!(
        "{label} stale-worker: A SIGSTOPped mid-job (lease 0.6 s); B took the job over {takeover:.2} s later and finished it; \
         A resumed: its late result was fenced (jobs_fenced=1), one final result"
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_running_jobs_and_gives_the_rest_back() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 400;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 200).await;
    let mut a = Proc::spawn(
        &db.url,
        "term-graceful",
        &[
            "--concurrency",
            "8",
            "--grace-ms",
            "5000",
            "--lease-ms",
            "30000",
        ],
    );
    wait_processed(&db, 40, Duration::from_secs(30)).await;
    let asked = Instant::now();
    a.signal("TERM");
    assert_eq!(a.exit_code(Duration::from_secs(10)).await, Some(0));
    let stop_s = asked.elapsed().as_secs_f64();
    // Everything A started has its result; nothing is still leased to A.
    let (started_unfinished, held): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM fault_runs f JOIN sk_task_results_t r USING (task_id) WHERE r.task_status <> 3),
                (SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (started_unfinished, held),
        (0, 0),
        "running jobs finished, the rest given back"
    );
    let done_by_a = processed(&db).await;

    // Interrupted past a short grace period: given back at once, not after the 30 s lease.
    let mut b = Proc::spawn(
        &db.url,
        "term-short-grace",
        &[
            "--concurrency",
            "8",
            "--grace-ms",
            "100",
            "--lease-ms",
            "30000",
        ],
    );
    wait_until("B to start jobs", Duration::from_secs(30), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = 'term-short-grace'",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (n > 0).then_some(())
    })
    .await;
    b.signal("TERM");
    assert_eq!(b.exit_code(Duration::from_secs(10)).await, Some(0));
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL OR task_locked_until_ts > now()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(held, 0, "every lease given back and claimable now");

    let c = Proc::spawn(
        &db.url,
        "term-finisher",
        &["--concurrency", "32", "--lease-ms", "30000"],
    );
    let finish = Instant::now();
    wait_processed(&db, JOBS as usize, Duration::from_secs(20)).await;
    c.signal("TERM");
    assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "sigterm: exit 0 after {stop_s:.2} s (grace 5 s); {done_by_a} jobs done by A, 0 started-but-unfinished, 0 leases held; \
         short-grace worker interrupted and gave back its leases; the rest finished {:.1} s later (lease 30 s)",
        finish.elapsed().as_secs_f64()
    ));
    drop(c);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_at_once() {
    let _serial = SERIAL.lock().await;
    // Jobs that work for a minute and do not look at the stop request.
    let (db, ids) = setup::<sqlx::Postgres>(4, 60_000).await;
    let mut w = Proc::spawn(
        &db.url,
        "term-twice",
        &[
            "--concurrency",
            "4",
            "--grace-ms",
            "30000",
            "--lease-ms",
            "30000",
        ],
    );
    wait_runs_started(&db, 4, "all four jobs to start").await;
    w.signal("TERM");
    wait_until(
        "the first SIGTERM to be logged",
        Duration::from_secs(10),
        || async {
            w.log_text()
                .contains("sk: SIGTERM received; stopping gracefully within 30s")
                .then_some(())
        },
    )
    .await;
    let asked = Instant::now();
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(10)).await, Some(0));
    let stop_s = asked.elapsed().as_secs_f64();
    assert!(
        stop_s < 5.0,
        "stopped {stop_s:.1} s after the second SIGTERM (grace 30 s)"
    );
    let log = w.log_text();
    assert!(
        log.contains("sk: SIGTERM received again; stopping at once"),
        "{log}"
    );
    let (held, attempts): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE task_locked_by IS NOT NULL OR task_locked_until_ts > now()),
                coalesce(sum(task_attempt), 0)
         FROM sk_tasks_queue_t",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (held, attempts),
        (0, 0),
        "the four running jobs were given back, attempts unused"
    );
    assert_eq!(ids.len(), 4);
    report(&format!(
        "second SIGTERM: exit 0 {stop_s:.2} s after it (grace 30 s), 4 running jobs given back with their attempts"
    ));
    db.drop().await;
}

on_backends! {
    /// As on PostgreSQL: SIGTERM finishes the running jobs within the grace period and
    /// gives the rest back at once; a short grace period interrupts and gives back too.
    fn sigterm_finishes_running_jobs_and_gives_the_rest_back_on => sigterm_on [sqlite, mysql]
}

async fn sigterm_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 300;
    let (db, ids) = setup::<B>(JOBS, 200).await;
    let slow = ["--grace-ms", "5000", "--lease-ms", "30000"];
    let mut a = Proc::spawn(
        &db.url,
        &format!("{label}-term-graceful"),
        &[&["--concurrency", "8"][..], &slow].concat(),
    );
    wait_processed(&db, 40, Duration::from_secs(30)).await;
    a.signal("TERM");
    assert_eq!(a.exit_code(Duration::from_secs(10)).await, Some(0));
    let started_unfinished = db
        .scalar(
            "SELECT count(*) FROM fault_runs f JOIN sk_task_results_t r USING (task_id) WHERE r.task_status <> 3",
            None,
        )
        .await;
    let held = db
        .scalar(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL",
            None,
        )
        .await;
    assert_eq!(
        (started_unfinished, held),
        (Some(0), Some(0)),
        "running jobs finished, the rest given back"
    );

    let mut b = Proc::spawn(
        &db.url,
        &format!("{label}-term-short-grace"),
        &[
            "--concurrency",
            "8",
            "--grace-ms",
            "100",
            "--lease-ms",
            "30000",
        ],
    );
    wait_until("B to start jobs", Duration::from_secs(30), || async {
        let n = db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = $1",
                Some(&format!("{label}-term-short-grace")),
            )
            .await?;
        (n > 0).then_some(())
    })
    .await;
    b.signal("TERM");
    assert_eq!(b.exit_code(Duration::from_secs(10)).await, Some(0));
    let counts = db.info().counts().await.unwrap();
    assert_eq!(
        (counts.running, counts.lease_expired, counts.scheduled),
        (0, 0, 0),
        "every lease given back and claimable now"
    );

    let c = Proc::spawn(
        &db.url,
        &format!("{label}-term-finisher"),
        &["--concurrency", "32", "--lease-ms", "30000"],
    );
    wait_processed(&db, JOBS as usize, Duration::from_secs(30)).await;
    c.signal("TERM");
    assert_each_job_finished_once(&db, &ids).await;
    drop(c);
    db.drop().await;
}
