//! Job control through `Client`: cancel, retry, run now, reschedule, pause and resume,
//! per-queue limits, snooze, per-enqueue limits, wait and enqueue by name, on every
//! backend, with the races against a worker finishing the same job. A module of the
//! `queue` test binary.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use sk_runtime::{
    job, AttemptOutcome, CancelOutcome, Client, CountBy, Data, Error, GroupCounts, Job, JobContext,
    JobError, JobFilter, JobStatus, ManualClock, Per, RescheduleOutcome, RetryOutcome, StopReason,
};
use sk_tests::{each_backend, recv, wait_until, Db, RunningWorker, TestBackend, TestDb};
use uuid::Uuid;

use super::{probe, worker, AlwaysFails, Probe, Record, SlowOnce, TakesAWhile, T};

/// Waits until an operator cancels it, then reports why it was asked to stop.
#[job]
async fn waits_for_cancel(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "started");
    ctx.cancelled().await;
    probe.saw(&ctx, &format!("{:?}", ctx.stop_reason()));
    Err(JobError::new("stopped because asked to"))
}

/// Fails for good until the fix is in.
#[job(max_attempts = 3)]
async fn needs_fix(ctx: JobContext, fixed: Data<Arc<AtomicBool>>) -> Result<u32, JobError> {
    if !fixed.load(Ordering::SeqCst) {
        return Err(JobError::fatal("bad configuration"));
    }
    Ok(u32::try_from(ctx.attempt()).unwrap_or(0))
}

/// Takes a moment, so a cancel can meet it running or finishing.
#[job]
async fn brief(n: u64) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(n % 7)).await;
    Ok(())
}

/// Counts how many of its runs are in progress at once.
#[derive(Default)]
struct Concurrency {
    now: AtomicUsize,
    max: AtomicUsize,
}

#[job(queue = "limited")]
async fn limited_work(n: u32, seen: Data<Arc<Concurrency>>) -> Result<(), JobError> {
    let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
    seen.max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20 + u64::from(n % 3) * 10)).await;
    seen.now.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

/// Snoozes its first two runs, then succeeds.
#[job(max_attempts = 1)]
async fn snoozes(ctx: JobContext, runs: Data<Arc<Mutex<Vec<i32>>>>) -> Result<(), JobError> {
    let n = {
        let mut runs = runs.lock().unwrap();
        runs.push(ctx.attempt());
        runs.len()
    };
    if n <= 2 {
        return Err(JobError::snooze(Duration::from_millis(30)));
    }
    Ok(())
}

/// Says how much it was asked to add up.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Sum {
    total: i64,
}

#[job]
async fn add_up(numbers: Vec<i64>) -> Result<Sum, JobError> {
    Ok(Sum {
        total: numbers.iter().sum(),
    })
}

fn client<B: TestBackend>(db: &Db<B>) -> Client
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    Client::new(db.pool.clone())
}

each_backend! {
    async fn cancel_takes_a_waiting_job_out_of_the_queue(db) {
        let client = client(&db);
        let later = Utc::now() + chrono::Duration::hours(1);
        let id = Record::new("never".into()).run_at(later).enqueue(&db.pool).await.unwrap();
        assert_eq!(client.cancel(id).await.unwrap(), CancelOutcome::Cancelled);
        let record = db.job(id).await;
        assert_eq!(record.status(), JobStatus::Cancelled);
        assert!(record.finalized_at.is_some());
        assert!(record.payload.is_some(), "kept for a retry");
        assert_eq!(record.max_attempts, None, "no longer live");
        assert!(record.attempts().is_empty(), "it never ran");
        assert_eq!(
            client.cancel(id).await.unwrap(),
            CancelOutcome::AlreadyFinished(JobStatus::Cancelled)
        );
        assert_eq!(client.cancel(Uuid::now_v7()).await.unwrap(), CancelOutcome::NotFound);

        // A worker that runs later (with the job's time come) never starts it.
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(later + chrono::Duration::seconds(1));
        let barrier = Record::new("barrier".into()).run_at(later).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE]).clock(clock).data(probe),
        );
        assert_eq!(recv(&mut rx, "the barrier job", T).await.id, barrier);
        db.wait_job(barrier, T, |r| r.status() == JobStatus::Processed).await;
        assert!(rx.try_recv().is_err(), "the cancelled job did not run");
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn cancel_stops_a_running_job_and_records_it_cancelled(db) {
        let client = client(&db);
        let (probe, mut rx) = probe();
        let id = WaitsForCancel::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[WaitsForCancel::TASK_TYPE]).data(probe),
        );
        assert_eq!(recv(&mut rx, "the job to start", T).await.label, "started");
        assert_eq!(client.cancel(id).await.unwrap(), CancelOutcome::CancelledWhileRunning);
        // The handler hears at once, and why.
        assert_eq!(
            recv(&mut rx, "the stop reason", T).await.label,
            format!("{:?}", Some(StopReason::Cancelled))
        );
        let record = db.job(id).await;
        assert_eq!(record.status(), JobStatus::Cancelled);
        let attempts = record.attempts();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(attempts[0].outcome, AttemptOutcome::Cancelled);
        assert_eq!(attempts[0].worker.as_deref(), Some(w.id.as_str()));
        // The run's own error after the cancel is not recorded, and nothing retries it.
        w.stop().await;
        let record = db.job(id).await;
        assert_eq!(record.status(), JobStatus::Cancelled);
        assert_eq!(record.error_count, 0);
        assert_eq!(record.last_error_type.as_deref(), Some("cancelled"));
        assert!(rx.try_recv().is_err(), "it ran once");
        db.drop().await;
    }
}

each_backend! {
    async fn cancel_racing_a_worker_finishing_has_exactly_one_outcome(db) {
        let client = client(&db);
        let jobs: Vec<Brief> = (0..300).map(Brief::new).collect();
        let ids = Brief::enqueue_many(&db.pool, jobs).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[Brief::TASK_TYPE]).concurrency(20));
        let mut said = HashMap::new();
        for id in ids.iter().rev() {
            said.insert(*id, client.cancel(*id).await.unwrap());
        }
        let info = db.info();
        wait_until("every job to finish", T, || async {
            let counts = info.counts().await.unwrap();
            (counts.available + counts.scheduled + counts.running + counts.lease_expired == 0)
                .then_some(())
        })
        .await;
        w.stop().await;
        let (mut cancelled, mut processed) = (0, 0);
        for id in &ids {
            let record = db.job(*id).await;
            match (said[id], record.status()) {
                (CancelOutcome::Cancelled | CancelOutcome::CancelledWhileRunning, JobStatus::Cancelled) => {
                    cancelled += 1;
                }
                (CancelOutcome::AlreadyFinished(JobStatus::Processed), JobStatus::Processed) => {
                    processed += 1;
                    assert!(record.attempts().iter().all(|a| a.outcome != AttemptOutcome::Cancelled));
                }
                (outcome, status) => panic!("job {id}: cancel said {outcome:?}, the record says {status:?}"),
            }
        }
        assert_eq!(cancelled + processed, ids.len());
        assert!(cancelled > 0, "some cancels came first");
        db.drop().await;
    }
}

/// Fails for good at its first attempt (briefly), succeeds at any later one.
#[job(max_attempts = 1)]
async fn fails_once(n: u64, ctx: JobContext) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(n % 5)).await;
    if ctx.attempt() == 1 {
        return Err(JobError::new("the first run fails"));
    }
    Ok(())
}

each_backend! {
    async fn retry_racing_a_worker_finishing_has_exactly_one_outcome(db) {
        let client = client(&db);
        let jobs: Vec<FailsOnce> = (0..300).map(FailsOnce::new).collect();
        let ids = FailsOnce::enqueue_many(&db.pool, jobs).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[FailsOnce::TASK_TYPE]).concurrency(20));
        // Retries while the worker is failing the same jobs: each is asked for once, in
        // the order the worker takes them, so some are running, some fatal, some waiting.
        let mut said = HashMap::new();
        for id in &ids {
            said.insert(*id, client.retry(*id).await.unwrap());
        }
        let info = db.info();
        wait_until("every job to finish", T, || async {
            let counts = info.counts().await.unwrap();
            (counts.available + counts.scheduled + counts.running + counts.lease_expired == 0)
                .then_some(())
        })
        .await;
        w.stop().await;
        let (mut again, mut once) = (0, 0);
        for id in &ids {
            let record = db.job(*id).await;
            let runs = record.attempts().len();
            match (said[id], record.status()) {
                // Retried after its fatal run: it ran a second time and succeeded.
                (RetryOutcome::Retried, JobStatus::Processed) if runs == 2 => again += 1,
                // Asked for before it failed: nothing changed (due at once already).
                (RetryOutcome::Running | RetryOutcome::MadeDue, JobStatus::Fatal) if runs == 1 => {
                    once += 1;
                }
                (outcome, status) => {
                    panic!("job {id}: retry said {outcome:?}, the record says {status:?} after {runs} runs")
                }
            }
        }
        assert_eq!(again + once, ids.len());
        db.drop().await;
    }
}

each_backend! {
    async fn retry_runs_a_fatal_job_again_with_a_fresh_budget(db) {
        let client = client(&db);
        let fixed = Arc::new(AtomicBool::new(false));
        let id = NeedsFix::new().enqueue(&db.pool).await.unwrap();
        let other = NeedsFix::new().with_queue("other").enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[NeedsFix::TASK_TYPE]).data(Arc::clone(&fixed)),
        );
        for job in [id, other] {
            db.wait_job(job, T, |r| r.status() == JobStatus::Fatal).await;
        }
        fixed.store(true, Ordering::SeqCst);
        assert_eq!(client.retry(id).await.unwrap(), RetryOutcome::Retried);
        let record = client.wait(id, T).await.unwrap();
        assert_eq!(record.status(), JobStatus::Processed);
        assert_eq!(record.output::<u32>().unwrap(), Some(2), "attempts go on counting");
        let outcomes: Vec<_> = record.attempts().iter().map(|a| a.outcome).collect();
        assert_eq!(outcomes, [AttemptOutcome::Fatal, AttemptOutcome::Processed]);
        assert_eq!(client.retry(id).await.unwrap(), RetryOutcome::Succeeded);
        assert_eq!(client.retry(Uuid::now_v7()).await.unwrap(), RetryOutcome::NotFound);

        // By filter: only the queue asked for.
        assert_eq!(client.retry_where(&JobFilter::new().queue("nothing here")).await.unwrap(), 0);
        assert_eq!(client.retry_where(&JobFilter::new().queue("other")).await.unwrap(), 1);
        let record = client.wait(other, T).await.unwrap();
        assert_eq!(record.status(), JobStatus::Processed);
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn retry_of_a_cancelled_job_waits_for_its_unique_key(db) {
        let client = client(&db);
        let post = |label: &str| {
            Record::new(label.into())
                .with_unique_key("report:7")
                .run_after(Duration::from_secs(3600))
                .enqueue(&db.pool)
        };
        let first = post("first").await.unwrap();
        assert_eq!(client.cancel(first).await.unwrap(), CancelOutcome::Cancelled);
        let second = post("second").await.unwrap();
        assert_ne!(second, first, "the cancelled job let its key go");
        assert_eq!(
            client.retry(first).await.unwrap(),
            RetryOutcome::KeyHeld,
            "the second job holds the key now"
        );
        assert_eq!(post("third").await.unwrap(), second);
        assert_eq!(client.cancel(second).await.unwrap(), CancelOutcome::Cancelled);
        assert_eq!(client.retry(first).await.unwrap(), RetryOutcome::Retried);
        assert_eq!(
            post("fourth").await.unwrap(),
            first,
            "the retried job holds its key again"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn retry_of_a_cancelled_job_runs_it(db) {
        let client = client(&db);
        let (probe, mut rx) = probe();
        let id = Record::new("second chance".into())
            .run_after(Duration::from_secs(3600))
            .enqueue(&db.pool)
            .await
            .unwrap();
        assert_eq!(client.cancel(id).await.unwrap(), CancelOutcome::Cancelled);
        assert_eq!(client.retry(id).await.unwrap(), RetryOutcome::Retried);
        // Due now, not at its old not-before time.
        let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
        let seen = recv(&mut rx, "the retried job", T).await;
        assert_eq!((seen.id, seen.attempt), (id, 1));
        assert_eq!(client.wait(id, T).await.unwrap().status(), JobStatus::Processed);
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn run_now_and_reschedule_move_a_waiting_job(db) {
        let client = client(&db);
        let (probe, mut rx) = probe();
        let id = Record::new("delayed".into())
            .run_after(Duration::from_secs(3600))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let at = Utc::now() + chrono::Duration::hours(2);
        assert_eq!(client.reschedule(id, at).await.unwrap(), RescheduleOutcome::Rescheduled);
        let record = db.job(id).await;
        let moved = record.locked_until.unwrap();
        assert!((moved - at).num_milliseconds().abs() < 1, "{moved} vs {at}");
        let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
        assert_eq!(client.run_now(id).await.unwrap(), RescheduleOutcome::Rescheduled);
        assert_eq!(recv(&mut rx, "the job run now", T).await.id, id);
        db.wait_job(id, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(
            client.run_now(id).await.unwrap(),
            RescheduleOutcome::Finished(JobStatus::Processed)
        );
        assert_eq!(client.run_now(Uuid::now_v7()).await.unwrap(), RescheduleOutcome::NotFound);
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn a_paused_queue_runs_nothing_until_resumed(db) {
        let client = client(&db);
        let (probe, mut rx) = probe();
        assert!(client.pause("held").await.unwrap());
        assert!(!client.pause("held").await.unwrap(), "paused already");
        let held = Record::new("held".into()).with_queue("held").enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
        // A later job of another queue runs; the paused one does not, though it is older.
        let free = Record::new("free".into()).enqueue(&db.pool).await.unwrap();
        assert_eq!(recv(&mut rx, "the other queue's job", T).await.id, free);
        db.wait_job(free, T, |r| r.status() == JobStatus::Processed).await;
        let queues = client.queues().await.unwrap();
        let state = queues.iter().find(|q| q.name == "held").unwrap();
        assert!(state.paused_at.is_some());
        assert_eq!((state.available, state.running), (1, 0));
        assert!(rx.try_recv().is_err(), "nothing of the paused queue ran");
        assert_eq!(db.job(held).await.status(), JobStatus::Unprocessed);

        assert!(client.resume("held").await.unwrap());
        assert!(!client.resume("held").await.unwrap(), "running already");
        assert_eq!(recv(&mut rx, "the resumed queue's job", T).await.id, held);
        let queues = client.queues().await.unwrap();
        assert!(queues.iter().all(|q| q.paused_at.is_none()));
        assert!(matches!(
            client.pause("").await,
            Err(Error::Invalid { what: "queue name", .. })
        ));
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn pausing_lets_running_jobs_finish(db) {
        let client = client(&db);
        let (probe, mut rx) = probe();
        let id = TakesAWhile::new(300).with_queue("busy").enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[TakesAWhile::TASK_TYPE]).data(probe));
        assert_eq!(recv(&mut rx, "the job to start", T).await.label, "started");
        assert!(client.pause("busy").await.unwrap());
        let next = TakesAWhile::new(1).with_queue("busy").enqueue(&db.pool).await.unwrap();
        assert_eq!(recv(&mut rx, "the running job to finish", T).await.label, "finished");
        db.wait_job(id, T, |r| r.status() == JobStatus::Processed).await;
        // Polls every 50 ms: a second is twenty chances to take the paused job.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(db.job(next).await.status(), JobStatus::Unprocessed);
        assert!(rx.try_recv().is_err());
        client.resume("busy").await.unwrap();
        client.wait(next, T).await.unwrap();
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn a_queue_limit_holds_under_a_burst(db) {
        let seen = Arc::new(Concurrency::default());
        let jobs: Vec<LimitedWork> = (0..30).map(LimitedWork::new).collect();
        let ids = LimitedWork::enqueue_many(&db.pool, jobs).await.unwrap();
        let (probe, _rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[LimitedWork::TASK_TYPE, Record::TASK_TYPE])
                .concurrency(10)
                .queue("limited", 3)
                .queues(["default"])
                .data(Arc::clone(&seen))
                .data(probe),
        );
        // The other queue keeps the rest of the slots.
        let other = Record::new("alongside".into()).enqueue(&db.pool).await.unwrap();
        let client = client(&db);
        client.wait(other, T).await.unwrap();
        for id in ids {
            client.wait(id, T).await.unwrap();
        }
        assert_eq!(seen.max.load(Ordering::SeqCst), 3, "at most (and at some point) 3 at once");
        w.stop().await;
        assert!(matches!(
            worker(&db, &[Record::TASK_TYPE]).queue("q", 0).build(),
            Err(Error::Invalid { what: "queue concurrency", .. })
        ));
        db.drop().await;
    }
}

each_backend! {
    async fn a_global_limit_holds_across_two_workers(db) {
        let client = client(&db);
        assert!(matches!(
            client.set_global_limit("limited", Some(0)).await,
            Err(Error::Invalid { what: "global limit", .. })
        ));
        client.set_global_limit("limited", Some(4)).await.unwrap();
        let state = client.queues().await.unwrap();
        assert_eq!(state.iter().find(|q| q.name == "limited").unwrap().global_limit, Some(4));
        let seen = Arc::new(Concurrency::default());
        let jobs: Vec<LimitedWork> = (0..40).map(LimitedWork::new).collect();
        let ids = LimitedWork::enqueue_many(&db.pool, jobs).await.unwrap();
        // Each worker alone could run 10 and 3 of them at once.
        let start = |local: Option<usize>| {
            let w = worker(&db, &[LimitedWork::TASK_TYPE]).concurrency(10);
            let w = match local {
                Some(n) => w.queue("limited", n),
                None => w,
            };
            RunningWorker::start(w.data(Arc::clone(&seen)))
        };
        let (a, b) = (start(None), start(Some(3)));
        for id in ids {
            client.wait(id, T).await.unwrap();
        }
        assert_eq!(seen.max.load(Ordering::SeqCst), 4, "at most (and at some point) 4 at once");
        a.stop().await;
        b.stop().await;

        // Without the limit, one worker runs more of them at once again.
        client.set_global_limit("limited", None).await.unwrap();
        let state = client.queues().await.unwrap();
        assert_eq!(state.iter().find(|q| q.name == "limited").unwrap().global_limit, None);
        let seen = Arc::new(Concurrency::default());
        let jobs: Vec<LimitedWork> = (0..20).map(LimitedWork::new).collect();
        let ids = LimitedWork::enqueue_many(&db.pool, jobs).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[LimitedWork::TASK_TYPE]).concurrency(10).data(Arc::clone(&seen)),
        );
        for id in ids {
            client.wait(id, T).await.unwrap();
        }
        assert!(seen.max.load(Ordering::SeqCst) > 4, "no limit any more");
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn a_snooze_runs_again_later_without_using_an_attempt(db) {
        let runs: Arc<Mutex<Vec<i32>>> = Arc::default();
        let id = Snoozes::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Snoozes::TASK_TYPE]).data(Arc::clone(&runs)),
        );
        let record = client(&db).wait(id, T).await.unwrap();
        w.stop().await;
        assert_eq!(record.status(), JobStatus::Processed, "max_attempts = 1 was enough");
        assert_eq!(*runs.lock().unwrap(), [1, 1, 1], "every run is attempt 1");
        assert_eq!(record.error_count, 0);
        assert_eq!(record.attempts().len(), 1);
        db.drop().await;
    }
}

/// Snoozes for longer than any time sk stores.
#[job]
async fn snoozes_for_ever(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "snoozed");
    Err(JobError::snooze(Duration::MAX))
}

each_backend! {
    /// MySQL's DATETIME ends with the year 9999, and SQLite's text times sort as times only
    /// up to then (a later year takes a `+`), so SQLite's queue table refuses any other
    /// shape: a delay past 9999 was refused at enqueue there and on MySQL, and a snooze
    /// past it was retried by the completer until the stop gave up. Such a delay now waits
    /// until the last microsecond of 9999, and a time after it is refused with
    /// `Error::Invalid`. On MySQL every time past 2038-01-19 was stored as NULL (sqlx sent
    /// it as a TIMESTAMP): a job due in 2040 was refused too.
    async fn delays_past_the_year_9999_wait_until_its_end(db) {
        let latest = chrono::DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999999Z")
            .unwrap()
            .to_utc();
        let later = latest + chrono::Duration::microseconds(1);
        let refused = Record::new("later".into()).run_at(later).enqueue(&db.pool).await.unwrap_err();
        assert!(
            matches!(refused, Error::Invalid { what: "run at", .. })
                && refused.to_string().contains("9999-12-31"),
            "{refused}"
        );
        let in_2040 = chrono::DateTime::parse_from_rfc3339("2040-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let moved = Record::new("2040".into()).run_at(in_2040).enqueue(&db.pool).await.unwrap();
        assert_eq!(db.job(moved).await.locked_until, Some(in_2040));
        let client = client(&db);
        assert_eq!(client.reschedule(moved, latest).await.unwrap(), RescheduleOutcome::Rescheduled);
        let refused = client.reschedule(moved, later).await.unwrap_err();
        assert!(matches!(refused, Error::Invalid { what: "reschedule time", .. }), "{refused}");
        // First in the claim order, were it due.
        let never = Record::new("never".into())
            .run_after(Duration::MAX)
            .with_priority(-1)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let snoozed = SnoozesForEver::new().enqueue(&db.pool).await.unwrap();
        let (probe, mut rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE, SnoozesForEver::TASK_TYPE]).data(probe),
        );
        assert_eq!(recv(&mut rx, "the snooze", T).await.label, "snoozed");
        // The stop writes every outcome it holds.
        w.stop().await;
        assert!(rx.try_recv().is_err(), "nothing else ran");
        for id in [moved, never, snoozed] {
            let record = db.job(id).await;
            assert_eq!(
                (record.status(), record.locked_until, record.locked_by),
                (JobStatus::Unprocessed, Some(latest), None),
                "{id}"
            );
        }
        db.drop().await;
    }
}

each_backend! {
    async fn per_enqueue_attempts_and_timeout(db) {
        let (probe, mut rx) = probe();
        let once = AlwaysFails::new().with_max_attempts(1).enqueue(&db.pool).await.unwrap();
        let quick = SlowOnce::new().with_timeout(Duration::from_millis(20)).with_max_attempts(1)
            .enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[AlwaysFails::TASK_TYPE, SlowOnce::TASK_TYPE]).data(probe),
        );
        let client = client(&db);
        let record = client.wait(once, T).await.unwrap();
        assert_eq!((record.status(), record.error_count), (JobStatus::Fatal, 1));
        let record = client.wait(quick, T).await.unwrap();
        assert_eq!(record.status(), JobStatus::Fatal);
        assert_eq!(record.last_error_type.as_deref(), Some("timeout"));
        assert!(record.last_error_message.unwrap().contains("20ms"));
        let mut labels = vec![recv(&mut rx, "a run", T).await.label, recv(&mut rx, "a run", T).await.label];
        labels.sort();
        assert_eq!(labels, ["always_fails", "slow_once"]);
        w.stop().await;
        assert!(matches!(
            Record::new("x".into()).with_max_attempts(0).enqueue(&db.pool).await,
            Err(Error::Invalid { what: "max attempts", .. })
        ));
        assert!(matches!(
            Record::new("x".into()).with_timeout(Duration::ZERO).enqueue(&db.pool).await,
            Err(Error::Invalid { what: "timeout", .. })
        ));
        db.drop().await;
    }
}

each_backend! {
    async fn wait_returns_the_typed_output_and_enqueue_by_name_checks_the_type(db) {
        let client = client(&db);
        let id = client
            .enqueue_json(AddUp::TASK_TYPE, serde_json::json!({"numbers": [1, 2, 39]}))
            .await
            .unwrap();
        assert!(matches!(
            client.wait(id, Duration::from_millis(50)).await,
            Err(Error::WaitTimedOut { .. })
        ));
        let w = RunningWorker::start(worker(&db, &[AddUp::TASK_TYPE]));
        let record = client.wait(id, T).await.unwrap();
        assert_eq!(record.output::<Sum>().unwrap(), Some(Sum { total: 42 }));
        w.stop().await;

        let unknown = client.enqueue_json("no_such_job", serde_json::json!({})).await;
        let Err(Error::Invalid { what: "task type", reason }) = unknown else {
            panic!("{unknown:?}");
        };
        assert!(reason.contains("no_such_job") && reason.contains("add_up"), "{reason}");
        assert!(matches!(
            client.enqueue_json(AddUp::TASK_TYPE, serde_json::json!({"numbers": "many"})).await,
            Err(Error::Invalid { what: "payload", .. })
        ));
        assert!(matches!(
            client.enqueue_json(AddUp::TASK_TYPE, serde_json::json!([1])).await,
            Err(Error::Invalid { what: "payload", .. })
        ));
        let elsewhere = client
            .enqueue_json_unchecked("runs_in_another_service", serde_json::json!({"a": 1}))
            .await
            .unwrap();
        assert_eq!(db.job(elsewhere).await.task_type, "runs_in_another_service");
        assert!(matches!(client.wait(Uuid::now_v7(), T).await, Err(Error::JobNotFound(_))));
        db.drop().await;
    }
}

/// On PostgreSQL, `wait` wakes on the done channel, as a worker in another process sends
/// it: here the outcome is written and the notification sent by hand, so that no worker
/// of this process tells the waiter.
#[tokio::test]
async fn wait_wakes_on_a_notification_from_another_process() {
    let db = TestDb::new().await;
    let later = Utc::now() + chrono::Duration::hours(1);
    let id = Record::new("elsewhere".into())
        .run_at(later)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let client = client(&db);
    let waiter = tokio::spawn(async move {
        let record = client.wait(id, T).await;
        (record, std::time::Instant::now())
    });
    // The waiter looks at 0, 10, 30, 70, ... 1,270 ms, then once a second: at 1,350 ms
    // its next look is 900 ms away.
    tokio::time::sleep(Duration::from_millis(1350)).await;
    // A waiting job has no results row until its first outcome: a cancel writes it, in
    // the statement that deletes its queue row (the waiter never sees neither).
    db.execute(&format!(
        "WITH gone AS (DELETE FROM sk_tasks_queue_t WHERE task_id = '{id}')
         INSERT INTO sk_task_results_t (task_id, task_type, task_source, task_queue, task_status,
             task_priority, task_posted_at_ts, task_processing_finalized_at_ts)
         VALUES ('{id}', 'record', 'app', 'default', 7, 0, now(), now())
         ON CONFLICT (task_id) DO UPDATE SET task_status = 7, task_processing_finalized_at_ts = now()"
    ))
    .await;
    let sent = std::time::Instant::now();
    db.execute("SELECT pg_notify('sk_task_done', '')").await;
    let (record, woke) = waiter.await.unwrap();
    assert_eq!(record.unwrap().status(), JobStatus::Cancelled);
    let after = woke.saturating_duration_since(sent);
    assert!(
        after < Duration::from_millis(400),
        "woken {after:?} after the notification"
    );
    db.drop().await;
}

/// The insight calls on 60,000 finished jobs read the results through indexes: the
/// partition holding them counts no sequential scan while a connection of their own runs
/// every call (PostgreSQL's table statistics, flushed when that connection ends).
#[tokio::test]
async fn insight_queries_read_the_results_through_indexes() {
    let db = TestDb::new().await;
    let seed = db.named_pool("sk_seed", 1).await;
    // Ids from the last ten minutes (one partition, or two across midnight); every 100th
    // job fatal and every 199th cancelled, 20 types, 5 queues, a third with a tenant.
    sqlx::query(
        "INSERT INTO sk_task_results_t (task_id, task_type, task_source, task_queue, task_status,
            task_priority, task_posted_at_ts, task_last_processing_attempted_at_ts,
            task_processing_finalized_at_ts, task_tenant,
            task_correlation_id, task_last_error_type, task_last_error_message, task_payload,
            task_metadata)
         SELECT sk_uuid_v7(t), 'type' || (g % 20), 'app', 'q' || (g % 5), s, 0, t, t, t,
            CASE WHEN g % 3 = 0 THEN 'tenant' || (g % 100) END, 'c' || g,
            CASE WHEN s = 6 THEN 'error' END, CASE WHEN s = 6 THEN 'down ' || (g % 7) END,
            '{}', CASE WHEN g % 50 = 0 THEN jsonb_build_object('k', g % 1000) END
         FROM generate_series(1, 60000) g,
            LATERAL (SELECT now() - (g % 600) * interval '1 s' AS t,
                CASE WHEN g % 100 = 0 THEN 6 WHEN g % 199 = 0 THEN 7 ELSE 3 END AS s) x",
    )
    .execute(&seed)
    .await
    .unwrap();
    sqlx::query("ANALYZE sk_task_results_t")
        .execute(&seed)
        .await
        .unwrap();
    let partition: String = sqlx::query_scalar(
        "SELECT tableoid::regclass::text FROM sk_task_results_t GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
    )
    .fetch_one(&seed)
    .await
    .unwrap();
    seed.close().await;
    db.wait_disconnected("sk_seed").await;
    let scans = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) FROM pg_stat_user_tables
             WHERE relid = $1::regclass",
        )
        .bind(&partition)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    // A backend leaves pg_stat_activity before it flushes its table statistics (its
    // status entry is cleared by the later-registered exit hook, which runs first), so
    // the seed's one sequential scan (the GROUP BY above) may still be on its way:
    // waited for, not read once. (Read once, it failed under the full suite's load.)
    let (seq_before, idx_before) = wait_until("the seed's statistics", T, || async {
        let (seq, idx) = scans().await;
        (seq >= 1).then_some((seq, idx))
    })
    .await;

    let pool = db.named_pool("sk_insight", 1).await;
    let client = Client::new(pool.clone());
    for by in [CountBy::Queue, CountBy::TaskType, CountBy::Tenant] {
        let groups = client.count_by(by).await.unwrap();
        let fatal: i64 = groups.iter().map(|g| g.fatal).sum();
        assert_eq!(fatal, 600, "{by:?}");
    }
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    let filters = [
        JobFilter::new(),
        JobFilter::new().queue("q0").status(JobStatus::Fatal),
        JobFilter::new().correlation_id("c4200"),
        JobFilter::new().posted(
            Some(hour_ago),
            Some(Utc::now() - chrono::Duration::minutes(5)),
        ),
        JobFilter::new().tenant("tenant0").status(JobStatus::Fatal),
    ];
    for filter in &filters {
        let page = client.jobs(filter, None, 100).await.unwrap();
        assert!(!page.jobs.is_empty(), "{filter:?}");
    }
    let groups = client.error_groups(hour_ago, 10).await.unwrap();
    let failed: i64 = groups
        .iter()
        .filter(|g| g.kind.as_deref() == Some("error"))
        .map(|g| g.count)
        .sum();
    assert_eq!(failed, 600, "{groups:?}");
    pool.close().await;
    db.wait_disconnected("sk_insight").await;

    // The calls' connection's counts arrive together, once it has flushed them.
    let (seq_after, idx_after) =
        wait_until(&format!("the calls to read {partition}"), T, || async {
            let (seq, idx) = scans().await;
            (idx > idx_before).then_some((seq, idx))
        })
        .await;
    assert!(idx_after > idx_before);
    assert_eq!(seq_after, seq_before, "no sequential scan of {partition}");
    db.drop().await;
}

each_backend! {
    async fn cancel_where_takes_what_the_filter_says(db) {
        let client = client(&db);
        let later = Duration::from_secs(3600);
        let mut acme = Vec::new();
        for i in 0..5 {
            acme.push(
                Record::new(format!("a{i}")).with_tenant("acme").run_after(later)
                    .enqueue(&db.pool).await.unwrap(),
            );
        }
        let other = Record::new("b".into()).with_tenant("other").run_after(later)
            .enqueue(&db.pool).await.unwrap();
        assert_eq!(
            client.cancel_where(&JobFilter::new().tenant("acme").status(JobStatus::Processing)).await.unwrap(),
            0,
            "none of them runs"
        );
        assert_eq!(client.cancel_where(&JobFilter::new().tenant("acme")).await.unwrap(), 5);
        for id in acme {
            assert_eq!(db.job(id).await.status(), JobStatus::Cancelled);
        }
        assert_eq!(db.job(other).await.status(), JobStatus::Unprocessed);
        assert_eq!(client.retry_where(&JobFilter::new().tenant("acme")).await.unwrap(), 5);
        assert_eq!(client.counts().await.unwrap().scheduled + client.counts().await.unwrap().available, 6);
        db.drop().await;
    }
}

each_backend! {
    async fn counts_by_group_and_the_job_list_with_filters_and_pages(db) {
        let client = client(&db);
        let started = Utc::now() - chrono::Duration::seconds(1);
        let mut waiting = Vec::new();
        for i in 0..3 {
            let mut job = Record::new(format!("r{i}")).with_queue("a").with_tenant("t1");
            if i == 0 {
                job = job.with_metadata(serde_json::json!({"k": "v1", "n": 7, "ok": true}));
            }
            waiting.push(job.enqueue(&db.pool).await.unwrap());
        }
        let delayed = Record::new("d".into()).with_queue("b").run_after(Duration::from_secs(3600))
            .enqueue(&db.pool).await.unwrap();
        let cancelled = Record::new("c".into()).with_queue("b").enqueue(&db.pool).await.unwrap();
        assert_eq!(client.cancel(cancelled).await.unwrap(), CancelOutcome::Cancelled);
        let fixed = Arc::new(AtomicBool::new(false));
        let mut fatal = Vec::new();
        for _ in 0..2 {
            fatal.push(NeedsFix::new().with_queue("a").enqueue(&db.pool).await.unwrap());
        }
        let w = RunningWorker::start(worker(&db, &[NeedsFix::TASK_TYPE]).data(fixed));
        for id in &fatal {
            client.wait(*id, T).await.unwrap();
        }
        w.stop().await;

        let flat = |groups: Vec<GroupCounts>| -> Vec<(Option<String>, [i64; 6])> {
            groups
                .into_iter()
                .map(|g| (g.key, [g.available, g.scheduled, g.retrying, g.running, g.fatal, g.cancelled]))
                .collect()
        };
        let counts = |key: Option<&str>, c: [i64; 6]| (key.map(str::to_owned), c);
        assert_eq!(
            flat(client.count_by(CountBy::Queue).await.unwrap()),
            [counts(Some("a"), [3, 0, 0, 0, 2, 0]), counts(Some("b"), [0, 1, 0, 0, 0, 1])]
        );
        assert_eq!(
            flat(client.count_by(CountBy::TaskType).await.unwrap()),
            [counts(Some(NeedsFix::TASK_TYPE), [0, 0, 0, 0, 2, 0]), counts(Some(Record::TASK_TYPE), [3, 1, 0, 0, 0, 1])]
        );
        assert_eq!(
            flat(client.count_by(CountBy::Tenant).await.unwrap()),
            [counts(None, [0, 1, 0, 0, 2, 1]), counts(Some("t1"), [3, 0, 0, 0, 0, 0])]
        );

        // Newest first, in pages.
        let filter = JobFilter::new().queue("a");
        let mut listed = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = client.jobs(&filter, after, 2).await.unwrap();
            pages += 1;
            listed.extend(page.jobs.iter().map(|j| j.id));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let mut expected: Vec<Uuid> = waiting.iter().chain(&fatal).copied().collect();
        expected.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(listed, expected);
        assert_eq!(pages, 3);

        let ids = |page: sk_runtime::JobPage| {
            let mut ids: Vec<Uuid> = page.jobs.iter().map(|j| j.id).collect();
            ids.sort_unstable();
            ids
        };
        let fatal_page = client.jobs(&JobFilter::new().status(JobStatus::Fatal), None, 10).await.unwrap();
        assert!(fatal_page.jobs.iter().all(|j| j.status() == JobStatus::Fatal
            && j.last_error_message.as_deref() == Some("bad configuration")));
        let mut sorted_fatal = fatal.clone();
        sorted_fatal.sort_unstable();
        assert_eq!(ids(fatal_page), sorted_fatal);
        for (key, value) in [("k", "v1"), ("n", "7"), ("ok", "true")] {
            let page = client.jobs(&JobFilter::new().metadata(key, value), None, 10).await.unwrap();
            assert_eq!(ids(page), [waiting[0]], "metadata {key} = {value}");
        }
        let page = client.jobs(&JobFilter::new().metadata("k", "v2"), None, 10).await.unwrap();
        assert!(page.jobs.is_empty());
        let mut sorted_waiting = waiting.clone();
        sorted_waiting.sort_unstable();
        let page = client
            .jobs(&JobFilter::new().tenant("t1").status(JobStatus::Unprocessed), None, 10)
            .await
            .unwrap();
        assert_eq!(ids(page), sorted_waiting);
        let page = client.jobs(&JobFilter::new().queue("b").status(JobStatus::Cancelled), None, 10).await.unwrap();
        assert_eq!(ids(page), [cancelled]);
        let page = client.jobs(&JobFilter::new().queue("b").status(JobStatus::Unprocessed), None, 10).await.unwrap();
        assert_eq!(ids(page), [delayed]);
        let page = client.jobs(&JobFilter::new().posted(None, Some(started)), None, 10).await.unwrap();
        assert!(page.jobs.is_empty(), "nothing was posted before the test");
        let page = client.jobs(&JobFilter::new().posted(Some(started), None), None, 10).await.unwrap();
        assert_eq!(page.jobs.len(), 7);
        // Filter values are data, never SQL.
        let page = client.jobs(&JobFilter::new().queue("a' OR '1'='1"), None, 10).await.unwrap();
        assert!(page.jobs.is_empty());
        let page = client.jobs(&JobFilter::new().metadata("k') OR 1=1 --", "v1"), None, 10).await.unwrap();
        assert!(page.jobs.is_empty());
        assert!(matches!(
            client.jobs(&JobFilter::new(), None, 0).await,
            Err(Error::Invalid { what: "page size", .. })
        ));
        db.drop().await;
    }
}

each_backend! {
    async fn error_groups_and_live_workers(db) {
        let client = client(&db);
        let since = Utc::now() - chrono::Duration::seconds(5);
        let mut fatal = Vec::new();
        for _ in 0..3 {
            fatal.push(NeedsFix::new().enqueue(&db.pool).await.unwrap());
        }
        let mut broken = Vec::new();
        for _ in 0..2 {
            broken.push(AlwaysFails::new().with_max_attempts(1).enqueue(&db.pool).await.unwrap());
        }
        let (probe, mut rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[NeedsFix::TASK_TYPE, AlwaysFails::TASK_TYPE, WaitsForCancel::TASK_TYPE])
                .queues(["default"])
                .concurrency(7)
                .data(Arc::new(AtomicBool::new(false)))
                .data(probe),
        );
        for id in fatal.iter().chain(&broken) {
            client.wait(*id, T).await.unwrap();
        }
        let waiting = WaitsForCancel::new().enqueue(&db.pool).await.unwrap();
        loop {
            if recv(&mut rx, "the waiting job to start", T).await.label == "started" {
                break;
            }
        }

        let workers = client.workers().await.unwrap();
        assert_eq!(workers.len(), 1, "{workers:?}");
        let me = &workers[0];
        assert_eq!(me.id, w.id);
        assert!(me.alive);
        assert_eq!(me.pid, i32::try_from(std::process::id()).unwrap());
        assert_eq!((me.concurrency, me.running), (7, 1));
        assert_eq!(me.queues.as_deref(), Some(&["default".to_owned()][..]));
        assert!(me.task_types.iter().any(|t| t == AlwaysFails::TASK_TYPE), "{:?}", me.task_types);

        let groups = client.error_groups(since, 10).await.unwrap();
        assert_eq!(groups.len(), 2, "{groups:?}");
        assert_eq!(groups[0].message.as_deref(), Some("bad configuration"));
        assert_eq!(groups[0].count, 3);
        assert!(fatal.contains(&groups[0].sample));
        assert_eq!(groups[1].message.as_deref(), Some("still broken at attempt 1"));
        assert_eq!((groups[1].count, groups[1].kind.as_deref()), (2, Some("error")));
        assert!(broken.contains(&groups[1].sample));
        assert!(groups[0].first_seen.unwrap() <= groups[0].last_seen.unwrap());
        let later = Utc::now() + chrono::Duration::hours(1);
        assert!(client.error_groups(later, 10).await.unwrap().is_empty());
        assert!(matches!(
            client.error_groups(since, 0).await,
            Err(Error::Invalid { what: "group count", .. })
        ));

        client.cancel(waiting).await.unwrap();
        w.stop().await;
        assert!(client.workers().await.unwrap().is_empty(), "a graceful stop removes the row");
        db.drop().await;
    }
}

each_backend! {
    async fn throughput_counts_runs_per_minute_and_hour(db) {
        let client = client(&db);
        let since = Utc::now() - chrono::Duration::minutes(2);
        let mut ids = Vec::new();
        for i in 0..10 {
            ids.push(AddUp::new(vec![i, 1]).enqueue(&db.pool).await.unwrap());
        }
        for _ in 0..2 {
            ids.push(AlwaysFails::new().with_max_attempts(1).enqueue(&db.pool).await.unwrap());
        }
        let (probe, _rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[AddUp::TASK_TYPE, AlwaysFails::TASK_TYPE]).data(probe),
        );
        for id in &ids {
            client.wait(*id, T).await.unwrap();
        }
        // A graceful stop writes what the heartbeats had not yet.
        w.stop().await;
        let totals = |rows: &[sk_runtime::Throughput], task_type: &str| -> (i64, i64) {
            rows.iter()
                .filter(|t| t.task_type == task_type)
                .fold((0, 0), |(p, f), t| (p + t.processed, f + t.failed))
        };
        for per in [Per::Minute, Per::Hour] {
            let rows = client.throughput(since, per, None).await.unwrap();
            assert_eq!(totals(&rows, AddUp::TASK_TYPE), (10, 0), "{per:?}: {rows:?}");
            assert_eq!(totals(&rows, AlwaysFails::TASK_TYPE), (0, 2), "{per:?}: {rows:?}");
            assert!(rows.iter().all(|t| t.mean_ms >= 0.0 && t.p95_ms >= 0.0));
            assert!(rows.windows(2).all(|w| w[0].at <= w[1].at), "oldest first");
        }
        let only = client.throughput(since, Per::Hour, Some(AddUp::TASK_TYPE)).await.unwrap();
        assert!(!only.is_empty() && only.iter().all(|t| t.task_type == AddUp::TASK_TYPE));
        let later = Utc::now() + chrono::Duration::hours(1);
        assert!(client.throughput(later, Per::Minute, None).await.unwrap().is_empty());

        // Kept as long as the results: a worker two days on, keeping a day, prunes them.
        let clock = ManualClock::new(Utc::now() + chrono::Duration::days(2));
        let w = RunningWorker::start(
            worker(&db, &[AddUp::TASK_TYPE])
                .clock(clock)
                .result_retention(Duration::from_secs(24 * 3600)),
        );
        wait_until("the old run counts pruned", T, || async {
            let rows = client.throughput(since, Per::Minute, None).await.unwrap();
            rows.is_empty().then_some(())
        })
        .await;
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn metrics_rows_of_workers_gone_a_day_are_removed(db) {
        let count = "SELECT count(*) FROM sk_metrics_t WHERE metric_owner_process_id = $1";
        // A worker that stopped (its metrics written on the way out) ...
        let gone = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe().0).id("gone-worker"));
        db.wait_worker_up("gone-worker").await;
        gone.stop().await;
        assert!(db.scalar(count, Some("gone-worker")).await.unwrap_or(0) > 0);
        // ... is a day gone when the next one starts, which removes its rows.
        let later = ManualClock::new(Utc::now() + chrono::Duration::days(2));
        let next = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe().0).clock(later));
        wait_until("the gone worker's metrics removed", T, || async {
            (db.scalar(count, Some("gone-worker")).await == Some(0)).then_some(())
        })
        .await;
        next.stop().await;
        db.drop().await;
    }
}

each_backend! {
    /// A live job's priority changes its place in the claim order (seed 003 changed it by
    /// SQL only); a finished job's is left as it ran; an unknown id is named so.
    async fn reprioritize_moves_a_waiting_job_and_leaves_a_finished_one(db) {
        use sk_runtime::ReprioritizeOutcome;
        let client = Client::new(db.pool.clone());
        let first = Record::new("first".into()).with_priority(5).enqueue(&db.pool).await.unwrap();
        let second = Record::new("second".into()).with_priority(5).enqueue(&db.pool).await.unwrap();
        let done = Record::new("done".into()).with_priority(9).enqueue(&db.pool).await.unwrap();
        let order = |peeked: Vec<sk_runtime::QueuedJob>| peeked.into_iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(order(client.peek(10).await.unwrap()), [first, second, done]);
        assert_eq!(client.reprioritize(second, -1).await.unwrap(), ReprioritizeOutcome::Reprioritized);
        assert_eq!(order(client.peek(10).await.unwrap()), [second, first, done]);
        assert_eq!(client.job(second).await.unwrap().unwrap().priority, -1);
        assert_eq!(client.reprioritize(second, -1).await.unwrap(), ReprioritizeOutcome::Reprioritized,
            "already at that priority");

        let driver = sk_runtime::__driver::Driver::new(db.pool.clone(), "w1");
        let at = Utc::now() + chrono::Duration::seconds(1);
        let claimed = driver.claim(&["record"], 3, at, at + chrono::Duration::seconds(30)).await.unwrap();
        assert_eq!(claimed.len(), 3);
        assert_eq!(client.reprioritize(first, 0).await.unwrap(), ReprioritizeOutcome::Reprioritized,
            "a running job keeps it for a retry");
        assert_eq!(driver.complete(&[(done, 1)], at).await.unwrap(), [done]);
        assert_eq!(client.reprioritize(done, 0).await.unwrap(),
            ReprioritizeOutcome::Finished(JobStatus::Processed));
        assert_eq!(client.job(done).await.unwrap().unwrap().priority, 9, "as it ran");
        assert_eq!(client.reprioritize(Uuid::now_v7(), 0).await.unwrap(), ReprioritizeOutcome::NotFound);
        db.drop().await;
    }
}
