//! Running jobs: priority, delay, retries and failures, panics and timeouts, payloads that do not deserialize, enqueue in a transaction.
//! A module of the `queue` test binary.

use super::*;

each_backend! {
    async fn runs_by_priority_then_fifo(db) {
        let jobs = [
            ("p5-a", 5),
            ("p1-a", 1),
            ("p3", 3),
            ("p1-b", 1),
            ("p5-b", 5),
            ("p-7", -7),
        ];
        let order = run_one_at_a_time(&db, &jobs).await;
        assert_eq!(order, ["p-7", "p1-a", "p1-b", "p3", "p5-a", "p5-b"]);
        let counts = db.info().counts().await.unwrap();
        assert_eq!(counts.status(JobStatus::Processed), 6);
        assert_eq!(
            counts.available + counts.scheduled + counts.running,
            0,
            "the queue table is empty"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn a_delayed_job_does_not_run_early(db) {
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let later = clock.now() + chrono::Duration::hours(1);
        let delayed = Record::new("delayed".into())
            .run_at(later)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let now = Record::new("now".into())
            .with_priority(10)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .concurrency(4)
                .clock(clock.clone())
                .data(probe),
        );

        // The claim that found `now` would have taken `delayed` too (it sorts first by
        // priority) had it been due.
        let first = recv(&mut rx, "the immediate job", T).await;
        assert_eq!((first.id, first.label.as_str()), (now, "now"));
        let record = db.job(delayed).await;
        assert_eq!(record.status(), JobStatus::Unprocessed);
        assert_eq!(record.attempt, Some(0));
        assert_eq!(record.first_attempt_at, None);
        let counts = db.info().clock(clock.clone()).counts().await.unwrap();
        assert_eq!(counts.scheduled, 1);
        // Its result written first: an hour on, its lease would have run out.
        db.wait_job(now, T, |r| r.status() == JobStatus::Processed)
            .await;

        clock.advance(Duration::from_secs(3600));
        let second = recv(&mut rx, "the delayed job", T).await;
        assert_eq!(second.id, delayed);
        let record = db
            .wait_job(delayed, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(record.first_attempt_at, Some(clock.now()));
        assert!(record.first_attempt_at.unwrap() >= later);
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn retries_with_the_jobs_backoff_then_succeeds(db) {
        let (probe, mut rx) = probe();
        let id = Flaky::new().enqueue(&db.pool).await.unwrap();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let t0 = clock.now();
        let w = RunningWorker::start(
            worker(&db, &[Flaky::TASK_TYPE])
                .clock(clock.clone())
                .data(probe),
        );
        let info = db.info().clock(clock.clone());

        // Attempt 1 fails: retry after base = 10 s.
        assert_eq!(recv(&mut rx, "attempt 1", T).await.attempt, 1);
        let r = db.wait_job(id, T, |r| r.error_count == 1).await;
        assert_eq!(r.status(), JobStatus::Error);
        assert_eq!(r.locked_until, Some(t0 + chrono::Duration::seconds(10)));
        assert_eq!(r.locked_by, None);
        assert_eq!(r.last_error_message.as_deref(), Some("failure number 1"));
        assert_eq!(r.last_error_recoverable, Some(true));
        assert_eq!(
            (r.first_attempt_at, r.last_attempt_at, r.finalized_at),
            (Some(t0), Some(t0), None)
        );

        // Not due 9 s later; due at 10 s.
        clock.advance(Duration::from_secs(9));
        assert_eq!(
            (
                info.counts().await.unwrap().scheduled,
                info.counts().await.unwrap().available
            ),
            (1, 0)
        );
        clock.advance(Duration::from_secs(1));
        let t1 = clock.now();
        assert_eq!(recv(&mut rx, "attempt 2", T).await.attempt, 2);
        let r = db.wait_job(id, T, |r| r.error_count == 2).await;
        assert_eq!(r.status(), JobStatus::Error);
        assert_eq!(
            r.locked_until,
            Some(t1 + chrono::Duration::seconds(20)),
            "exponential: 2 x base"
        );

        clock.advance(Duration::from_secs(20));
        let t2 = clock.now();
        assert_eq!(recv(&mut rx, "attempt 3", T).await.attempt, 3);
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.error_count, 2);
        assert_eq!(
            (r.first_attempt_at, r.last_attempt_at, r.finalized_at),
            (Some(t0), Some(t2), Some(t2))
        );
        // Its queue row is gone; its attempts are read from its record, in the list too.
        assert_eq!(r.attempt, Some(3), "the attempt it succeeded at");
        let listed = sk_runtime::Client::new(db.pool.clone())
            .jobs(&sk_runtime::JobFilter::new(), None, 10)
            .await
            .unwrap();
        assert_eq!(listed.jobs[0].attempt, Some(3), "{listed:?}");
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn fatal_after_max_attempts(db) {
        let (probe, mut rx) = probe();
        let id = AlwaysFails::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[AlwaysFails::TASK_TYPE]).data(probe));
        let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        let runs: Vec<Event> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        let attempts: Vec<i32> = runs.iter().map(|e| e.attempt).collect();
        assert_eq!(attempts, [1, 2, 3]);
        // Each run knows when it was claimed: the record's last attempt time is the last
        // run's (to the microsecond the tables keep), and the first its first.
        let micros_apart = |a: chrono::DateTime<chrono::Utc>, b: Option<chrono::DateTime<chrono::Utc>>| {
            (a - b.expect("a time")).num_microseconds().map(i64::abs)
        };
        assert!(runs.windows(2).all(|w| w[0].attempted_at < w[1].attempted_at));
        assert!(micros_apart(runs[2].attempted_at, r.last_attempt_at) <= Some(1), "{runs:?} {r:?}");
        assert!(micros_apart(runs[0].attempted_at, r.first_attempt_at) <= Some(1), "{runs:?} {r:?}");
        assert_eq!(r.error_count, 3);
        assert_eq!(
            r.last_error_message.as_deref(),
            Some("still broken at attempt 3")
        );
        assert_eq!(r.last_error_recoverable, Some(true));
        assert!(r.finalized_at.is_some() && r.finalized_at >= r.last_attempt_at);
        assert_eq!(r.attempt, Some(3), "the attempt it failed for good at");
        db.drop().await;
    }
}

each_backend! {
    async fn a_fatal_error_is_not_retried(db) {
        let (probe, mut rx) = probe();
        let id = Refuses::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[Refuses::TASK_TYPE]).data(probe));
        let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        assert_eq!(std::iter::from_fn(|| rx.try_recv().ok()).count(), 1);
        assert_eq!(r.error_count, 1);
        assert_eq!(r.last_error_recoverable, Some(false));
        assert_eq!(
            r.last_error_message.as_deref(),
            Some("invalid account: retrying cannot help")
        );
        db.drop().await;
    }
}

each_backend! {
    async fn failures_finishing_together_are_recorded_each(db) {
        // Twenty runs held at a gate fail at once, half for good and half to retry: the
        // completer records them together (one statement on PostgreSQL, one transaction on
        // the others), each with its own outcome, message and attempt history.
        const JOBS: usize = 20;
        let (probe, mut rx) = probe();
        let mut ids = Vec::new();
        for i in 0..JOBS {
            ids.push((i % 2 == 0, FailsTogether::new(i % 2 == 0).enqueue(&db.pool).await.unwrap()));
        }
        let (open_tx, closed) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[FailsTogether::TASK_TYPE])
                .concurrency(JOBS)
                .data(probe)
                .data(closed),
        );
        for _ in 0..JOBS {
            assert_eq!(recv(&mut rx, "a first run", T).await.attempt, 1);
        }
        open_tx.send(true).unwrap();
        for &(fatal, id) in &ids {
            let r = if fatal {
                db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await
            } else {
                db.wait_job(id, T, |r| r.status() == JobStatus::Processed).await
            };
            assert_eq!(r.error_count, 1, "{r:?}");
            assert_eq!(r.last_error_recoverable, Some(!fatal), "{r:?}");
            assert!(r.payload.is_some(), "an ended job keeps its payload, failed for good or not: {r:?}");
            let message = if fatal { "failed for good" } else { "failed, to retry" };
            assert_eq!(r.last_error_message.as_deref(), Some(message), "{r:?}");
            let outcome = if fatal { AttemptOutcome::Fatal } else { AttemptOutcome::Retried };
            let failed: Vec<_> = r.failed_attempts.iter().map(|a| (a.attempt, a.outcome, a.message.as_deref())).collect();
            assert_eq!(failed, [(1, outcome, Some(message))], "{r:?}");
        }
        let w_id = w.id.clone();
        w.stop().await;
        let metric = |name: &'static str| {
            let (db, w_id) = (&db, &w_id);
            async move {
                db.scalar(
                    &format!("SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = '{name}'"),
                    Some(w_id),
                )
                .await
            }
        };
        let half = Some(JOBS as i64 / 2);
        assert_eq!(
            (metric("jobs_failed").await, metric("jobs_retried").await, metric("jobs_succeeded").await),
            (half, half, half)
        );
        let runs = db
            .scalar(
                "SELECT CAST(sum(et_n_execution_cycles) AS BIGINT) FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'fails_together'",
                None,
            )
            .await;
        assert_eq!(runs, Some(JOBS as i64 * 3 / 2), "every run in the statistics, once");
        db.drop().await;
    }
}

each_backend! {
    async fn panics_and_timeouts_are_retried(db) {
        let (probe, _rx) = probe();
        let panicking = PanicsOnce::new().enqueue(&db.pool).await.unwrap();
        let slow = SlowOnce::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[PanicsOnce::TASK_TYPE, SlowOnce::TASK_TYPE]).data(probe),
        );
        let p = db
            .wait_job(panicking, T, |r| r.status() == JobStatus::Processed)
            .await;
        let s = db
            .wait_job(slow, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert_eq!(
            (p.error_count, p.last_error_type.as_deref()),
            (1, Some("panic"))
        );
        assert!(
            p.last_error_message
                .as_deref()
                .unwrap()
                .contains("boom on attempt 1"),
            "{p:?}"
        );
        assert_eq!(
            (s.error_count, s.last_error_type.as_deref()),
            (1, Some("timeout"))
        );
        assert_eq!(
            s.last_error_message.as_deref(),
            Some("timed out after 100ms")
        );
        db.drop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_deserialize_is_fatal_with_its_reason() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let bad = insert_raw(&db, Typed::TASK_TYPE, r#"{"count": "twelve", "name": "x"}"#).await;
    let good = Typed::new(12, "ok".into()).enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(worker(&db, &[Typed::TASK_TYPE]).data(probe));
    let r = db
        .wait_job(bad, T, |r| r.status() == JobStatus::Fatal)
        .await;
    db.wait_job(good, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let ran: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|e| e.label)
        .collect();
    assert_eq!(ran, ["ok:12"], "the bad payload never reached the fn");
    assert_eq!(
        (
            r.error_count,
            r.last_error_type.as_deref(),
            r.last_error_recoverable
        ),
        (1, Some("payload"), Some(false))
    );
    let message = r.last_error_message.unwrap();
    assert!(
        message.contains("payload of `typed` does not deserialize"),
        "{message}"
    );
    assert!(
        message.contains("invalid type: string \"twelve\", expected i64"),
        "{message}"
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_posted_job_without_attempts_is_fatal_with_that_reason() {
    let db = TestDb::new().await;
    let id = insert_raw(&db, Record::TASK_TYPE, r#"{"label":"x"}"#).await;
    sqlx::query("UPDATE sk_tasks_queue_t SET task_max_attempts = 0 WHERE task_id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
    w.stop().await;
    assert!(rx.try_recv().is_err(), "the handler never ran");
    assert_eq!(
        (r.last_error_type.as_deref(), r.last_error_message.as_deref()),
        (
            Some("max_attempts"),
            Some("task_max_attempts is 0, so the job may not run at all; post it with task_max_attempts of at least 1")
        )
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_unknown_task_types_are_left_untouched() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let unknown = insert_raw(&db, "nobody_runs_this", "{}").await;
    let known = Record::new("known".into()).enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    assert_eq!(recv(&mut rx, "the known job", T).await.id, known);
    db.wait_job(known, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let r = db.job(unknown).await;
    assert_eq!(
        (r.status(), r.attempt, r.locked_by.as_deref(), r.error_count),
        (JobStatus::Unprocessed, Some(0), None, 0)
    );
    let head = db.info().peek(10).await.unwrap();
    assert_eq!(
        head.iter()
            .map(|j| (j.id, j.task_type.as_str()))
            .collect::<Vec<_>>(),
        [(unknown, "nobody_runs_this")]
    );
    db.drop().await;
}

each_backend! {
    async fn enqueue_in_a_transaction_is_visible_after_commit_and_gone_after_rollback(db) {
        let (probe, mut rx) = probe();
        // Polling once a minute: only the NOTIFY sent at commit can wake this worker in time.
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .poll_interval(Duration::from_secs(60))
                .data(probe),
        );
        let info = db.info();

        let mut tx = db.pool.begin().await.unwrap();
        let rolled_back = Record::new("rolled back".into())
            .enqueue(&mut *tx)
            .await
            .unwrap();
        assert!(
            info.job(rolled_back).await.unwrap().is_none(),
            "invisible before commit"
        );
        tx.rollback().await.unwrap();
        assert!(
            info.job(rolled_back).await.unwrap().is_none(),
            "gone after rollback"
        );

        let mut tx = db.pool.begin().await.unwrap();
        let committed = Record::new("committed".into())
            .enqueue(&mut *tx)
            .await
            .unwrap();
        assert!(
            info.job(committed).await.unwrap().is_none(),
            "invisible before commit"
        );
        assert!(info.peek(10).await.unwrap().is_empty());
        tx.commit().await.unwrap();

        let ran = recv(&mut rx, "the committed job", Duration::from_secs(10)).await;
        assert_eq!((ran.id, ran.label.as_str()), (committed, "committed"));
        db.wait_job(committed, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert!(rx.try_recv().is_err(), "the rolled-back job never ran");
        db.drop().await;
    }
}
