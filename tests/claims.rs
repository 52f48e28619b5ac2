//! Claims ahead of the slots: a claim that comes back late, the local queue and its
//! lease checks, the bound on results waiting, heartbeats of long jobs. A module of the
//! `queue` test binary.

use super::*;

/// A claim held up past its lease (a partition, a stopped process, a stalled database)
/// comes back holding jobs whose leases have run out, which another worker may claim at
/// once: the worker hands them back unstarted, with their attempts intact, and claims
/// afresh (found by the chaos checker: such a job ran twice, fenced). PostgreSQL only: its
/// lock wait is what holds the claim up here; the rule lives in the producer, above every
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_comes_back_after_its_lease_ran_out_starts_nothing() {
    let db = TestDb::new().await;
    let id = Record::new("late".into()).enqueue(&db.pool).await.unwrap();
    let start = Utc::now() + chrono::Duration::seconds(1);
    let clock = ManualClock::new(start);
    let lease = Duration::from_secs(30);
    // The queue table locked: the worker's first claim waits on it.
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE sk_tasks_queue_t IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .data(probe)
            .clock(clock.clone())
            .lease(lease),
    );
    wait_until("the claim to wait on the lock", T, || async {
        let waiting = db
            .scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND wait_event_type = 'Lock' AND query LIKE '%task_attempt = q.task_attempt + 1%'",
                None,
            )
            .await;
        (waiting > Some(0)).then_some(())
    })
    .await;
    // Held up past its lease, by the worker's clock.
    clock.advance(lease + Duration::from_secs(1));
    blocker.rollback().await.unwrap();
    let ran = recv(&mut rx, "the job to run", T).await;
    let r = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let worker_id = w.id.clone();
    w.stop().await;
    assert_eq!(
        (ran.id, ran.attempt, ran.attempted_at),
        (id, 1, clock.now()),
        "it ran on a fresh claim, made after the late one, as attempt 1"
    );
    assert!(rx.try_recv().is_err(), "it ran once");
    let attempts: Vec<_> = r
        .attempts()
        .iter()
        .map(|a| (a.attempt, a.started_at))
        .collect();
    assert_eq!(
        attempts,
        [(1, Some(clock.now()))],
        "one attempt, the fresh claim's"
    );
    let given_back = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_given_back'",
            Some(&worker_id),
        )
        .await;
    assert_eq!(given_back, Some(1), "the late claim's job was handed back");
    db.drop().await;
}

/// A job that waits in the local queue for a slot keeps its lease by heartbeats; when
/// they cannot be written (a stalled database, SQLite's writer taken by others) the lease
/// runs out, and another worker may claim the job. The worker does not start a job whose
/// lease, by its own clock, has less than a heartbeat interval left: it hands it back
/// unstarted and the job runs on a fresh claim (found by the chaos checker on SQLite: a
/// prefetched job started 4.5 s after its claim, after another worker had claimed it). No
/// heartbeat is due here (the lease is 30 s), so only the claim's lease is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_job_whose_lease_ran_out_is_handed_back_unstarted() {
    let db = TestDb::new().await;
    let start = Utc::now() + chrono::Duration::seconds(1);
    let clock = ManualClock::new(start);
    let lease = Duration::from_secs(30);
    let (probe, mut rx) = probe();
    let (open, gate) = gate(false);
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE, Gated::TASK_TYPE])
            .data(probe)
            .data(gate)
            .clock(clock.clone())
            .lease(lease)
            .concurrency(1)
            .prefetch(10),
    );
    // One job run first, so the worker prefetches (it does not before a first run).
    Record::new("first".into()).enqueue(&db.pool).await.unwrap();
    assert_eq!(recv(&mut rx, "the first job", T).await.label, "first");
    let gated = Gated::new("holds the slot".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        recv(&mut rx, "the gated job", T).await.label,
        "holds the slot"
    );
    // The running job's lease is extended, as its heartbeat would: only the waiting job's
    // runs out below (else the worker's next claim could take the running one again,
    // which is another test's: leases::a_job_claimed_again_by_its_own_worker_...).
    db.execute(&format!(
        "UPDATE sk_tasks_queue_t SET task_locked_until_ts = task_locked_until_ts + interval '1 hour'
         WHERE task_id = '{gated}'"
    ))
    .await;
    let id = Record::new("waits".into()).enqueue(&db.pool).await.unwrap();
    let sql = format!("SELECT count(*) FROM sk_tasks_queue_t WHERE task_id = '{id}' AND task_locked_by IS NOT NULL");
    wait_until("the waiting job to be prefetched", T, || async {
        (db.scalar(&sql, None).await == Some(1)).then_some(())
    })
    .await;
    // Its lease ran out, by the worker's clock, while it waited for the slot.
    clock.advance(lease + Duration::from_secs(1));
    open.send(true).unwrap();
    let ran = recv(&mut rx, "the waiting job", T).await;
    db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let worker_id = w.id.clone();
    w.stop().await;
    assert_eq!(
        (ran.id, ran.attempted_at),
        (id, clock.now()),
        "it ran on a fresh claim, made after its lease ran out"
    );
    assert!(rx.try_recv().is_err(), "it ran once");
    let given_back = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_given_back'",
            Some(&worker_id),
        )
        .await;
    assert!(given_back >= Some(1), "handed back: {given_back:?}");
    db.drop().await;
}

/// A handler's slot is free for the next job when the handler returns, not once its
/// result is written; but the results waiting are bounded. With one slot and the results
/// table locked (no result can be written), 1 + 2000 jobs run and then the worker claims no
/// more until the results are written (no prefetch, so the leases held are exactly
/// those). (PostgreSQL: the lock is a table lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_ahead_of_their_results_up_to_a_bound() {
    const JOBS: usize = 2100;
    const BOUND: usize = 1 + 2000;
    let db = TestDb::new().await;
    // Enqueued (which writes the results table too) before the lock, due only when the
    // worker's clock says so.
    let clock = ManualClock::new(Utc::now());
    let due = clock.now() + chrono::Duration::seconds(10);
    let ids = Record::enqueue_many(
        &db.pool,
        (0..JOBS).map(|i| Record::new(i.to_string()).run_at(due)),
    )
    .await
    .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .concurrency(1)
            .prefetch(0)
            .clock(clock.clone())
            .data(probe),
    );
    // Started and idle: a job has run and been written.
    let warm = Record::new("warm".into())
        .run_at(clock.now())
        .enqueue(&db.pool)
        .await
        .unwrap();
    recv(&mut rx, "a first job", T).await;
    db.wait_job(warm, T, |r| r.status() == JobStatus::Processed)
        .await;
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE sk_task_results_t IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(11));
    for n in 0..BOUND {
        recv(
            &mut rx,
            &format!("job {n} of {BOUND}, no result written"),
            T,
        )
        .await;
    }
    // The worker is held at the bound: its leases are the bound's, and no other job runs
    // while the producer polls (every 50 ms) for a while.
    let held = "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL";
    assert_eq!(db.scalar(held, None).await, Some(BOUND as i64));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.try_recv().is_err(), "a job ran past the bound");
    assert_eq!(db.scalar(held, None).await, Some(BOUND as i64));
    blocker.rollback().await.unwrap();
    for n in BOUND..JOBS {
        recv(
            &mut rx,
            &format!("job {n}, once the results were written"),
            T,
        )
        .await;
    }
    for id in ids {
        db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
    }
    w.stop().await;
    db.drop().await;
}

each_backend! {
    /// With short jobs a worker claims beyond its free slots: the jobs wait in the worker,
    /// leased, and start in claim order as slots free; a stop hands the waiting ones back
    /// at once, unstarted and with their attempts intact.
    async fn a_small_concurrency_claims_ahead_and_gives_back_what_waits(db) {
        const JOBS: usize = 20;
        let (probe, mut rx) = probe();
        let (_closed_forever, closed) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE, Gated::TASK_TYPE])
                .concurrency(1)
                .grace_period(Duration::from_millis(200))
                .data(probe.clone())
                .data(closed),
        );
        // A short job first, so the worker knows its jobs are short; then one that holds
        // the only slot.
        Record::new("warm".into()).enqueue(&db.pool).await.unwrap();
        assert_eq!(recv(&mut rx, "the short job", T).await.label, "warm");
        let held = Gated::new("held".into()).enqueue(&db.pool).await.unwrap();
        assert_eq!(recv(&mut rx, "the job holding the slot", T).await.label, "held");
        // Lower numbers first: the last enqueued run first.
        let ids = Record::enqueue_many(
            &db.pool,
            (0..JOBS).map(|i| Record::new(i.to_string()).with_priority(-(i as i32))),
        )
        .await
        .unwrap();
        let locked = format!(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = '{}'",
            w.id
        );
        // How many it claims ahead follows the short job's measured run time (a loaded
        // machine may see more than a millisecond, and then fewer than all twenty).
        wait_until("the worker to claim jobs ahead of its slot", T, || async {
            (db.scalar(&locked, None).await > Some(1)).then_some(())
        })
        .await;
        assert!(rx.try_recv().is_err(), "a waiting job ran without a slot");
        let stop = std::time::Instant::now();
        w.stop().await;
        assert!(stop.elapsed() < Duration::from_secs(5), "{:?}", stop.elapsed());
        assert!(rx.try_recv().is_err(), "a waiting job ran during the stop");
        for id in ids.iter().copied().chain([held]) {
            let r = db.job(id).await;
            assert_eq!(
                (r.status(), r.attempt, r.error_count, r.locked_by.as_deref()),
                (JobStatus::Unprocessed, Some(0), 0, None),
                "given back unstarted: {r:?}"
            );
            assert!(r.locked_until.unwrap() <= Utc::now(), "claimable at once");
        }

        // Another worker, one slot, its jobs short from the start: all run once, in
        // claim order (priority).
        let (_open_tx, open) = gate(true);
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE, Gated::TASK_TYPE])
                .concurrency(1)
                .data(probe)
                .data(open),
        );
        let mut labels = Vec::new();
        for _ in 0..=JOBS {
            labels.push(recv(&mut rx, "a job given back", T).await.label);
        }
        w.stop().await;
        labels.retain(|l| l != "held");
        let expected: Vec<String> = (0..JOBS).rev().map(|i| i.to_string()).collect();
        assert_eq!(labels, expected, "the short jobs in priority order");
        for id in ids {
            assert_eq!(db.job(id).await.status(), JobStatus::Processed);
        }
        assert!(rx.try_recv().is_err(), "each ran once");
        db.drop().await;
    }
}

each_backend! {
    async fn heartbeats_keep_a_long_job_from_being_taken_over(db) {
        let (probe, mut rx) = probe();
        // A lease ten heartbeats long: a heartbeat held up for 900 ms (a loaded CI machine
        // has stalled one past 200 ms) still keeps it.
        let lease = Duration::from_millis(1000);
        let id = TakesAWhile::new(3000).enqueue(&db.pool).await.unwrap();
        let a = RunningWorker::start(
            worker(&db, &[TakesAWhile::TASK_TYPE])
                .lease(lease)
                .heartbeat_interval(Duration::from_millis(100))
                .data(probe.clone()),
        );
        assert_eq!(recv(&mut rx, "the job to start", T).await.label, "started");
        // B polls every 50 ms with free slots for the whole run: three leases long.
        let b = RunningWorker::start(
            worker(&db, &[TakesAWhile::TASK_TYPE])
                .lease(lease)
                .data(probe),
        );
        let done = recv(&mut rx, "the job to finish", T).await;
        assert_eq!(
            (done.id, done.label.as_str(), done.attempt),
            (id, "finished", 1),
            "no second start in between"
        );
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        a.stop().await;
        b.stop().await;
        assert!(rx.try_recv().is_err(), "the job ran once");
        assert_eq!(r.error_count, 0);
        assert!(r.processing_time_ms >= 1500, "{}", r.processing_time_ms);
        db.drop().await;
    }
}
