//! Leases: many workers and one job, heartbeats, graceful stops, lost and lapsed leases, the prefetch and its bound, cron ticks across workers.
//! A module of the `queue` test binary.

use super::*;

each_backend! {
    async fn two_workers_run_20000_jobs_exactly_once(db) {
        const JOBS: u32 = 20_000;
        let ids = Counted::enqueue_many(&db.pool, (0..JOBS).map(Counted::new))
            .await
            .unwrap();
        assert_eq!(ids.len(), JOBS as usize);
        let runs = Arc::new(Mutex::new(HashMap::new()));
        let tallies: Vec<Tally> = (0..2)
            .map(|_| Tally {
                runs: runs.clone(),
                mine: Arc::default(),
            })
            .collect();
        let second_pool = db.second_pool().await;
        let a = RunningWorker::start(
            worker(&db, &[Counted::TASK_TYPE])
                .concurrency(16)
                .data(tallies[0].clone()),
        );
        let b = RunningWorker::start(
            Worker::builder(second_pool)
                .task_types([Counted::TASK_TYPE])
                .poll_interval(Duration::from_millis(50))
                .concurrency(16)
                .data(tallies[1].clone()),
        );
        let info = db.info();
        wait_until(
            "20,000 processed results",
            Duration::from_secs(120),
            || async {
                let counts = info.counts().await.ok()?;
                (counts.status(JobStatus::Processed) == i64::from(JOBS)).then_some(())
            },
        )
        .await;
        a.stop().await;
        b.stop().await;

        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs.len(), JOBS as usize, "every job ran");
        assert!(runs.values().all(|n| *n == 1), "no job ran twice");
        assert!(ids.iter().all(|id| runs.contains_key(id)));
        let (ran_a, ran_b) = (
            tallies[0].mine.load(Ordering::Relaxed),
            tallies[1].mine.load(Ordering::Relaxed),
        );
        assert_eq!(ran_a + ran_b, u64::from(JOBS));
        assert!(
            ran_a > 0 && ran_b > 0,
            "both workers took jobs: {ran_a} / {ran_b}"
        );
        let counts = info.counts().await.unwrap();
        assert_eq!(
            counts.available + counts.scheduled + counts.running + counts.lease_expired,
            0
        );
        let finalized = db
            .scalar(
                "SELECT count(*) FROM sk_task_results_t WHERE task_processing_finalized_at_ts IS NOT NULL",
                None,
            )
            .await;
        let total = db
            .scalar(
                "SELECT CAST(sum(et_n_execution_cycles) AS BIGINT) FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'counted'",
                None,
            )
            .await;
        assert_eq!(
            (finalized, total),
            (Some(i64::from(JOBS)), Some(i64::from(JOBS))),
            "each job finalized once"
        );
        db.drop().await;
    }
}

/// Heartbeats (every 200 ms, over up to 400 leases) and batched finalizations of the same
/// rows run side by side for the whole burn-down; the server counts no deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_and_finalizations_never_deadlock() {
    const JOBS: u32 = 30_000;
    let db = TestDb::new().await;
    Jittery::enqueue_many(&db.pool, (0..JOBS).map(Jittery::new))
        .await
        .unwrap();
    let before = db.deadlocks().await;
    let tally = Tally {
        runs: Arc::default(),
        mine: Arc::default(),
    };
    let mut workers = Vec::new();
    for _ in 0..2 {
        let pool = db.named_pool("sk-deadlock-test", 12).await;
        workers.push(RunningWorker::start(
            Worker::builder(pool)
                .task_types([Jittery::TASK_TYPE])
                .concurrency(200)
                .lease(Duration::from_secs(2))
                .heartbeat_interval(Duration::from_millis(200))
                .poll_interval(Duration::from_millis(50))
                .data(tally.clone()),
        ));
    }
    let info = db.info();
    wait_until(
        "30,000 processed results",
        Duration::from_secs(240),
        || async {
            let counts = info.counts().await.ok()?;
            (counts.status(JobStatus::Processed) == i64::from(JOBS)).then_some(())
        },
    )
    .await;
    for w in workers {
        w.stop().await;
    }
    // The workers' pools are gone with them; their backends flush their statistics on exit.
    db.wait_disconnected("sk-deadlock-test").await;
    let deadlocks = db.deadlocks().await - before;
    let runs = tally.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS as usize, "every job succeeded");
    assert!(runs.values().all(|n| *n == 1), "no job succeeded twice");
    assert_eq!(deadlocks, 0, "deadlocks detected by the server");
    db.drop().await;
}

/// A backlog enqueued in bulk gets statistics (and a vacuum) at once, though its live rows
/// far outnumber its dead ones: without statistics every claim scans and sorts the whole
/// queue (docs/reliability.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_backlog_is_analyzed_and_vacuumed_at_once() {
    let db = TestDb::new().await;
    Record::enqueue_many(&db.pool, (0..20_000).map(|i| Record::new(i.to_string())))
        .await
        .unwrap();
    let (probe, _rx) = probe();
    // A worker for another task type: the backlog stays, live and never dead.
    let w = RunningWorker::start(worker(&db, &[Typed::TASK_TYPE]).data(probe));
    let (vacuums, live, dead): (i64, i64, i64) = wait_until(
        "the queue table to be analyzed and vacuumed",
        Duration::from_secs(5),
        || async {
            let row: (i64, i64, i64, bool) = sqlx::query_as(
                "SELECT vacuum_count, n_live_tup, n_dead_tup, last_analyze IS NOT NULL
                 FROM pg_stat_user_tables WHERE relid = 'sk_tasks_queue_t'::regclass",
            )
            .fetch_one(&db.pool)
            .await
            .ok()?;
            (row.0 > 0 && row.3).then_some((row.0, row.1, row.2))
        },
    )
    .await;
    w.stop().await;
    assert!(vacuums >= 1 && live > dead, "{vacuums} {live} {dead}");
    db.drop().await;
}

each_backend! {
    async fn a_cron_job_is_enqueued_once_per_tick_with_two_workers(db) {
        let (probe, mut rx) = probe();
        // Half a second past a whole second, so every advance crosses exactly one tick.
        let start = Utc::now().with_nanosecond(500_000_000).unwrap() + chrono::Duration::seconds(1);
        let clock = ManualClock::new(start);
        let second_pool = db.second_pool().await;
        let a = RunningWorker::start(
            worker(&db, &[EverySecond::TASK_TYPE])
                .clock(clock.clone())
                .data(probe.clone()),
        );
        let b = RunningWorker::start(
            Worker::builder(second_pool)
                .task_types([EverySecond::TASK_TYPE])
                .poll_interval(Duration::from_millis(50))
                .clock(clock.clone())
                .data(probe),
        );
        db.wait_worker_up(&a.id).await;
        db.wait_worker_up(&b.id).await;
        let mut seen = Vec::new();
        for _ in 0..5 {
            clock.advance(Duration::from_secs(1));
            let event = recv(&mut rx, "a scheduled run", T).await;
            seen.push(event.id);
            db.wait_job(event.id, T, |r| r.status() == JobStatus::Processed)
                .await;
        }
        a.stop().await;
        b.stop().await;
        assert!(rx.try_recv().is_err(), "no tick ran twice");
        let keys = db
            .text_and_time(
                "SELECT r.task_unique_key, r.task_first_processing_attempted_at_ts FROM sk_task_results_t r
                 WHERE task_type = 'every_second' ORDER BY task_unique_key",
            )
            .await;
        let ticks: Vec<String> = (1..=5)
            .map(|s| {
                format!(
                    "every_second@{}",
                    (start.with_nanosecond(0).unwrap() + chrono::Duration::seconds(s)).to_rfc3339()
                )
            })
            .collect();
        assert_eq!(
            keys.iter().map(|k| k.0.clone()).collect::<Vec<_>>(),
            ticks,
            "one job per tick"
        );
        assert_eq!(seen.len(), 5);
        db.drop().await;
    }
}

each_backend! {
    async fn a_graceful_stop_gives_unfinished_jobs_back_at_once(db) {
        let (probe, mut rx) = probe();
        let ids = Gated::enqueue_many(&db.pool, ["a", "b", "c"].map(|l| Gated::new(l.into())))
            .await
            .unwrap();
        let (_closed_forever, closed) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .concurrency(2)
                .grace_period(Duration::from_millis(200))
                .data(probe.clone())
                .data(closed),
        );
        let started = [
            recv(&mut rx, "a started job", T).await.id,
            recv(&mut rx, "a started job", T).await.id,
        ];
        let stop = std::time::Instant::now();
        w.stop().await;
        assert!(
            stop.elapsed() < Duration::from_secs(5),
            "stopped after the grace period: {:?}",
            stop.elapsed()
        );
        for id in started {
            let r = db.job(id).await;
            assert_eq!(
                (r.status(), r.attempt, r.locked_by.as_deref()),
                (JobStatus::Unprocessed, Some(0), None),
                "{r:?}"
            );
            assert!(
                r.locked_until.unwrap() <= Utc::now(),
                "claimable at once, not after the lease"
            );
        }

        // Another worker (lease 30 s) takes all three well before any lease could run out.
        let (_open_tx, open) = gate(true);
        let w = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .concurrency(4)
                .data(probe)
                .data(open),
        );
        for id in ids {
            db.wait_job(id, Duration::from_secs(10), |r| {
                r.status() == JobStatus::Processed
            })
            .await;
        }
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn a_job_that_stops_when_asked_keeps_its_attempts(db) {
        let (probe, mut rx) = probe();
        let id = Cooperative::new(false).enqueue(&db.pool).await.unwrap();
        // Three deploys in a row, each during the job's run (max_attempts = 3).
        for deploy in 1..=3 {
            let (_closed_forever, closed) = gate(false);
            let w = RunningWorker::start(
                worker(&db, &[Cooperative::TASK_TYPE])
                    .data(probe.clone())
                    .data(closed),
            );
            let run = recv(&mut rx, "the job to start", T).await;
            assert_eq!((run.id, run.attempt), (id, 1), "deploy {deploy}");
            let stop = std::time::Instant::now();
            w.stop().await;
            assert!(
                stop.elapsed() < Duration::from_secs(4),
                "the job stopped when asked, within the 5 s grace period"
            );
            let r = db.job(id).await;
            assert_eq!(
                (r.status(), r.error_count, r.attempt, r.locked_by.as_deref()),
                (JobStatus::Unprocessed, 0, Some(0), None),
                "given back, no attempt used, no error recorded: {r:?}"
            );
            assert!(r.locked_until.unwrap() <= Utc::now(), "claimable at once");
        }
        let (_open_tx, open) = gate(true);
        let w = RunningWorker::start(
            worker(&db, &[Cooperative::TASK_TYPE])
                .data(probe.clone())
                .data(open),
        );
        assert_eq!(recv(&mut rx, "the fourth run", T).await.attempt, 1);
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.error_count, 0);

        // Saying "interrupted" when nobody asked is an ordinary, recorded failure.
        let rogue = Cooperative::new(true).enqueue(&db.pool).await.unwrap();
        let r = db.wait_job(rogue, T, |r| r.error_count == 1).await;
        w.stop().await;
        assert_eq!(r.last_error_type.as_deref(), Some("interrupted"));
        assert!(
            r.last_error_message
                .as_deref()
                .unwrap()
                .contains("the worker had not asked it to stop"),
            "{r:?}"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn a_worker_that_lost_its_lease_cannot_finalize(db) {
        let (probe, mut rx) = probe();
        // Microseconds, as the database keeps them.
        let start = chrono::DateTime::from_timestamp_micros(
            (Utc::now() + chrono::Duration::seconds(1)).timestamp_micros(),
        )
        .unwrap();
        let clock = ManualClock::new(start);
        let id = Gated::new("x".into()).enqueue(&db.pool).await.unwrap();
        let (release_a, closed) = gate(false);
        let a = RunningWorker::start(
            // One slot, held by the stalled run, so A cannot re-claim the job itself.
            worker(&db, &[Gated::TASK_TYPE])
                .concurrency(1)
                .lease(Duration::from_secs(3600))
                .clock(clock.clone())
                .data(probe.clone())
                .data(closed),
        );
        assert_eq!(recv(&mut rx, "worker A's run", T).await.attempt, 1);

        // A stalls past its lease; B takes the job over and finishes it.
        clock.advance(Duration::from_secs(7200));
        let (_open_tx, open) = gate(true);
        let b = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .clock(clock.clone())
                .data(probe)
                .data(open),
        );
        assert_eq!(recv(&mut rx, "worker B's run", T).await.attempt, 2);
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        b.stop().await;

        // A finishes late: its result is refused.
        release_a.send(true).unwrap();
        let a_id = a.id.clone();
        a.stop().await;
        let fenced = db
            .scalar(
                "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_fenced'",
                Some(&a_id),
            )
            .await;
        assert_eq!(fenced, Some(1), "worker A's late result was refused");
        let after = db.job(id).await;
        // A's attempt counts as failed ("worker lost", recorded by B's claim), once, and
        // is on record (seed 004's audit log) with A's claim time as the first attempt's.
        assert_eq!(
            (after.status(), after.error_count, after.finalized_at),
            (JobStatus::Processed, 1, r.finalized_at)
        );
        let attempts = after.attempts();
        assert_eq!(
            attempts
                .iter()
                .map(|a| (a.attempt, a.outcome, a.worker.as_deref(), a.kind.as_deref()))
                .collect::<Vec<_>>(),
            [
                (1, AttemptOutcome::Lost, Some(a_id.as_str()), Some("worker_lost")),
                (2, AttemptOutcome::Processed, after.last_worker.as_deref(), None),
            ],
            "{attempts:?}"
        );
        assert!(attempts[0].message.as_deref().unwrap().starts_with("worker lost"));
        assert_eq!(attempts[0].started_at, Some(start), "A's claim time");
        assert_eq!(after.first_attempt_at, Some(start), "the true first attempt");
        assert_ne!(after.last_worker.as_deref(), Some(a_id.as_str()), "B recorded it");
        assert_eq!(after.payload.as_deref(), Some(r#"{"label":"x"}"#), "kept on record");
        let finalizations = db
            .scalar(
                "SELECT CAST(sum(et_n_execution_cycles) AS BIGINT) FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'gated'",
                None,
            )
            .await;
        assert_eq!(finalizations, Some(1), "one finalization recorded");
        db.drop().await;
    }
}

/// One worker runs a job twice at once: its clock moves past its own lease, so it claims
/// the job again while the first run still holds a slot. Both runs end together, in one
/// batch of completions: the second run's success is recorded, the first one's is
/// refused, and the worker goes on. (On SQLite the duplicate id failed the whole batch,
/// retried for ever while heartbeats kept the jobs leased.) On a runtime of one thread,
/// so the two ends reach the completer together.
async fn claimed_again_by_its_own_worker<B: TestBackend>(db: Db<B>)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let (probe, mut rx) = probe();
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let id = Gated::new("x".into()).enqueue(&db.pool).await.unwrap();
    let (release, closed) = gate(false);
    let w = RunningWorker::start(
        worker(&db, &[Gated::TASK_TYPE])
            .concurrency(2)
            .lease(Duration::from_secs(3600))
            .heartbeat_interval(Duration::from_secs(1800))
            .clock(clock.clone())
            .data(probe)
            .data(closed),
    );
    assert_eq!(recv(&mut rx, "the first run", T).await.attempt, 1);
    clock.advance(Duration::from_secs(7200));
    assert_eq!(recv(&mut rx, "the second run", T).await.attempt, 2);
    release.send(true).unwrap();
    let r = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let next = Gated::new("y".into()).enqueue(&db.pool).await.unwrap();
    db.wait_job(next, T, |r| r.status() == JobStatus::Processed)
        .await;
    let worker_id = w.id.clone();
    w.stop().await;
    assert_eq!(failed_attempts(&r), [(1, AttemptOutcome::Lost)], "{r:?}");
    let fenced = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_fenced'",
            Some(&worker_id),
        )
        .await;
    assert_eq!(fenced, Some(1), "the first run's result was refused");
    db.drop().await;
}

each_backend! {
    current_thread;
    async fn a_job_claimed_again_by_its_own_worker_is_recorded_once(db) {
        claimed_again_by_its_own_worker(db).await;
    }
}

/// Only the completion of a job someone waits on (`Client::wait`) notifies the done
/// channel, whether it succeeded or failed for good: with a notice in every completion, PostgreSQL's one-at-a-time commit of
/// notifying transactions held up workers on many hosts (docs/scaling.md). PostgreSQL
/// only: the others have no notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_job_waited_on_notifies_the_done_channel() {
    const JOBS: i64 = 200;
    let db = TestDb::new().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen("sk_task_done").await.unwrap();
    for i in 0..JOBS {
        Record::new(format!("job {i}"))
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    // And some that fail for good.
    for _ in 0..5 {
        Refuses::new().enqueue(&db.pool).await.unwrap();
    }
    let (open_tx, closed) = gate(false);
    let waited = Gated::new("waited on".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    // One job at a time, a completion each; the gated one holds its slot until the wait
    // has begun, so every other job finishes first.
    let w = RunningWorker::start(
        worker(
            &db,
            &[Record::TASK_TYPE, Refuses::TASK_TYPE, Gated::TASK_TYPE],
        )
        .concurrency(2)
        .data(probe)
        .data(closed),
    );
    wait_until("the other jobs to finish", T, || async {
        let done = db
            .scalar(
                "SELECT count(*) FROM sk_task_results_t WHERE task_status IN (3, 6)",
                None,
            )
            .await;
        (done == Some(JOBS + 5)).then_some(())
    })
    .await;
    while recv(&mut rx, "a run", T).await.label != "waited on" {}
    // Notices arrive in commit order: had any of those completions notified, its notice
    // would come before this one.
    sqlx::query("SELECT pg_notify('sk_task_done', 'sentinel')")
        .execute(&db.pool)
        .await
        .unwrap();
    let first = tokio::time::timeout(T, listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.payload(),
        "sentinel",
        "a completion nobody waited on notified"
    );
    let client = sk_runtime::Client::new(db.pool.clone());
    let waiting = tokio::spawn(async move { client.wait(waited, T).await });
    wait_until("the wait to mark its job", T, || async {
        let marked = db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_waited",
                None,
            )
            .await;
        (marked == Some(1)).then_some(())
    })
    .await;
    open_tx.send(true).unwrap();
    assert_eq!(
        waiting.await.unwrap().unwrap().status(),
        JobStatus::Processed
    );
    let notice = tokio::time::timeout(T, listener.recv())
        .await
        .expect("the waited job's completion notifies")
        .unwrap();
    assert_eq!(notice.payload(), "");
    w.stop().await;
    db.drop().await;
}
