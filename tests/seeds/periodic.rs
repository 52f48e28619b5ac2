//! Seed 003's periodic tasks and the rescue of hung ones, on every backend: a periodic
//! job never overlaps itself, cron schedules in a time zone, catch-up or skip of missed
//! ticks, and timeouts.

use std::time::{Duration, Instant};

use sk_runtime::{Job, JobStatus};
use sk_tests::{each_backend, recv, Db, RunningWorker, TestBackend};

use super::super::{probe, worker, Probe, Record, TakesAWhile, T};

/// When each run of `slow_periodic` or `slow_tick` started and ended.
#[derive(Clone, Default)]
struct Spans(std::sync::Arc<std::sync::Mutex<Vec<(Instant, Instant)>>>);

#[sk_runtime::job(every = "1s")]
async fn slow_periodic(spans: sk_runtime::Data<Spans>) {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    spans.0.lock().unwrap().push((start, Instant::now()));
}

/// Runs `task_type` (a job taking `Data<Spans>`) on two workers until it has run `runs`
/// times; returns the runs' spans and how many of its jobs were live at that moment.
async fn spans_on_two_workers<B: TestBackend>(
    db: &Db<B>,
    task_type: &str,
    runs: usize,
) -> (Vec<(Instant, Instant)>, i64)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let spans = Spans::default();
    let workers: Vec<RunningWorker> = (0..2)
        .map(|_| RunningWorker::start(worker(db, &[task_type]).data(spans.clone())))
        .collect();
    sk_tests::wait_until(&format!("{runs} runs"), Duration::from_secs(30), || async {
        (spans.0.lock().unwrap().len() >= runs).then_some(())
    })
    .await;
    let live = db
        .scalar(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_type = $1",
            Some(task_type),
        )
        .await
        .expect("a count");
    for w in workers {
        w.stop().await;
    }
    let spans = spans.0.lock().unwrap().clone();
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "a run started while the last one still ran: {spans:?}"
        );
    }
    (spans, live)
}

#[sk_runtime::job(every = "1s", after = "due")]
async fn steady_periodic(spans: sk_runtime::Data<Spans>) {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(400)).await;
    spans.0.lock().unwrap().push((start, Instant::now()));
}

#[sk_runtime::job(every = "1s", after = "due")]
async fn late_periodic(spans: sk_runtime::Data<Spans>) {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    spans.0.lock().unwrap().push((start, Instant::now()));
}

each_backend! {
    /// Seed 003's periodic task, `next_run_time + period`: runs start a period apart
    /// however long each takes (a fixed delay of 1 s after 0.4 s runs would start them
    /// 1.4 s apart), one at a time across workers.
    async fn a_fixed_rate_job_starts_a_period_after_the_last_was_due(db) {
        let (spans, live) = spans_on_two_workers(&db, SteadyPeriodic::TASK_TYPE, 4).await;
        assert_eq!(live, 1, "one live run at a time, however many workers");
        // Each run starts at its due time, `next_run_time` a whole number of periods
        // after the first's, give or take how late a claim picked it up (a loaded
        // machine's 200 ms or so): a fixed delay would drift by 0.4 s a run.
        let first = spans[0].0;
        let due = |k: usize| first + Duration::from_secs(k as u64);
        for (k, (start, _)) in spans.iter().enumerate().skip(1) {
            let off = start.saturating_duration_since(due(k)).max(due(k).saturating_duration_since(*start));
            assert!(
                off < Duration::from_millis(300),
                "run {k} starts {k} periods after the first, not {off:?} off: {spans:?}"
            );
        }
        db.drop().await;
    }
}

each_backend! {
    /// A fixed-rate run longer than its period: the slot it passed is due at once, so the
    /// next run starts as it ends, never beside it, and the older slots are not made up.
    async fn a_fixed_rate_run_longer_than_its_period_is_followed_at_once(db) {
        let (spans, live) = spans_on_two_workers(&db, LatePeriodic::TASK_TYPE, 3).await;
        assert_eq!(live, 1, "one live run at a time, however many workers");
        for pair in spans.windows(2) {
            let gap = pair[1].0.saturating_duration_since(pair[0].1);
            assert!(
                pair[1].0 >= pair[0].1 && gap < Duration::from_millis(500),
                "the next run starts as the late one ends: {gap:?} in {spans:?}"
            );
        }
        db.drop().await;
    }
}

each_backend! {
    async fn a_periodic_job_runs_a_period_after_each_run_and_never_overlaps(db) {
        let (spans, live) = spans_on_two_workers(&db, SlowPeriodic::TASK_TYPE, 3).await;
        assert_eq!(live, 1, "one live run at a time, however many workers");
        for pair in spans.windows(2) {
            let gap = pair[1].0.saturating_duration_since(pair[0].1);
            assert!(
                pair[1].0 > pair[0].1 && gap >= Duration::from_millis(950),
                "the next run starts a period after the last one ended: gap {gap:?}"
            );
        }
        db.drop().await;
    }
}

each_backend! {
    async fn a_worker_default_timeout_rescues_a_hung_job(db) {
        let (probe, _rx) = probe();
        let id = TakesAWhile::new(60_000)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[TakesAWhile::TASK_TYPE])
                .default_timeout(Duration::from_millis(100))
                .data(probe),
        );
        let r = db.wait_job(id, T, |r| r.error_count >= 1).await;
        w.stop().await;
        assert_eq!(
            (
                r.last_error_type.as_deref(),
                r.last_error_message.as_deref()
            ),
            (Some("timeout"), Some("timed out after 100ms"))
        );
        db.drop().await;
    }
}

#[sk_runtime::job(schedule = "* * * * * *")]
async fn slow_tick(spans: sk_runtime::Data<Spans>) {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    spans.0.lock().unwrap().push((start, Instant::now()));
}

each_backend! {
    async fn a_slow_cron_job_skips_the_ticks_that_come_while_it_runs(db) {
        let (spans, live) = spans_on_two_workers(&db, SlowTick::TASK_TYPE, 2).await;
        assert!(live <= 1, "{live} ticks live at once");
        // Two runs of 2.5 s with a tick every second: the ticks in between were skipped, and
        // left no results row.
        let rows: i64 =
            db
                .scalar("SELECT count(*) FROM sk_task_results_t WHERE task_type = 'slow_tick'", None)
                .await
                .expect("a count");
        assert!(
            rows <= spans.len() as i64 + 1,
            "{rows} results rows for {} runs",
            spans.len()
        );
        db.drop().await;
    }
}

#[sk_runtime::job(schedule = "0 0 * * * *", missed = "run_once")]
async fn hourly_catch_up(ctx: sk_runtime::JobContext, probe: sk_runtime::Data<Probe>) {
    probe.saw(&ctx, "caught up");
}

#[sk_runtime::job(schedule = "0 0 * * * *")]
async fn hourly_skip(ctx: sk_runtime::JobContext, probe: sk_runtime::Data<Probe>) {
    probe.saw(&ctx, "skipped tick ran");
}

each_backend! {
    async fn a_missed_tick_runs_once_at_start_when_asked(db) {
        use chrono::Timelike;
        let (probe, mut rx) = probe();
        // Half past the hour: the tick at the top of the hour was missed.
        let now = chrono::Utc::now();
        let half_past = now
            .with_minute(30)
            .and_then(|t| t.with_second(0))
            .and_then(|t| t.with_nanosecond(0))
            .unwrap();
        let clock = sk_runtime::ManualClock::new(half_past);
        let types = [HourlyCatchUp::TASK_TYPE, HourlySkip::TASK_TYPE];
        let a = RunningWorker::start(worker(&db, &types).clock(clock.clone()).data(probe.clone()));
        let run = recv(&mut rx, "the missed tick", T).await;
        assert_eq!(run.label, "caught up");
        db.wait_job(run.id, T, |r| r.status() == JobStatus::Processed)
            .await;
        // Another worker starting later in the same hour finds the tick done.
        let b = RunningWorker::start(worker(&db, &types).clock(clock.clone()).data(probe));
        db.wait_worker_up(&b.id).await;
        a.stop().await;
        // A stopping scheduler finishes its pass: B has tried to enqueue the missed tick.
        b.stop().await;
        let ticks = db
            .texts("SELECT task_unique_key FROM sk_task_results_t WHERE task_type IN ('hourly_catch_up', 'hourly_skip')")
            .await;
        let top_of_hour = half_past.with_minute(0).unwrap();
        assert_eq!(
            ticks,
            [format!("hourly_catch_up@{}", top_of_hour.to_rfc3339())],
            "one catch-up run, and none for the job that skips missed ticks"
        );
        assert!(rx.try_recv().is_err());
        db.drop().await;
    }
}

#[sk_runtime::job(schedule = "0 0 8 * * *", timezone = "Europe/Paris")]
async fn paris_morning(ctx: sk_runtime::JobContext, probe: sk_runtime::Data<Probe>) {
    probe.saw(&ctx, "8:00 in Paris");
}

each_backend! {
    async fn a_cron_time_zone_ticks_at_local_time(db) {
        use chrono::TimeZone as _;
        let (probe, mut rx) = probe();
        // 7:59:30 in Paris on a winter day (CET, UTC+1).
        let clock = sk_runtime::ManualClock::new(
            chrono::Utc
                .with_ymd_and_hms(2026, 1, 10, 6, 59, 30)
                .unwrap(),
        );
        let w = RunningWorker::start(
            worker(&db, &[ParisMorning::TASK_TYPE])
                .clock(clock.clone())
                .data(probe),
        );
        db.wait_worker_up(&w.id).await;
        clock.advance(Duration::from_secs(60));
        let run = recv(&mut rx, "the 8:00 tick in Paris", T).await;
        let r = db
            .wait_job(run.id, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert_eq!(
            r.unique_key.as_deref(),
            Some("paris_morning@2026-01-10T07:00:00+00:00")
        );
        // An unknown zone in a schedule given at run time fails the build, naming it.
        let refused = sk_runtime::Worker::builder(db.pool.clone())
            .task_types([Record::TASK_TYPE])
            .data(super::super::super::probe().0)
            .periodic("CRON_TZ=Mars/Olympus 0 8 * * *", Record::new("x".into()))
            .build()
            .err()
            .expect("an unknown zone is refused")
            .to_string();
        assert!(
            refused.contains("unknown time zone \"Mars/Olympus\""),
            "{refused}"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn a_schedule_added_at_run_time_runs_once_per_tick_across_workers(db) {
        use chrono::Timelike;
        let (probe, mut rx) = probe();
        // Half a second past a whole second, so every advance crosses exactly one tick.
        let start =
            chrono::Utc::now().with_nanosecond(500_000_000).unwrap() + chrono::Duration::seconds(1);
        let clock = sk_runtime::ManualClock::new(start);
        let a = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .clock(clock.clone())
                .data(probe.clone()),
        );
        let b = RunningWorker::start(
            sk_runtime::Worker::builder(db.second_pool().await)
                .task_types([Record::TASK_TYPE])
                .poll_interval(Duration::from_millis(50))
                .clock(clock.clone())
                .data(probe),
        );
        db.wait_worker_up(&a.id).await;
        db.wait_worker_up(&b.id).await;
        let schedules = sk_runtime::StoredSchedules::new(db.pool.clone()).clock(clock.clone());
        // Bad input is refused, and nothing is stored.
        let record = |label: &str| Record::new(label.into());
        assert!(schedules.add("", "* * * * * *", record("x")).await.is_err());
        assert!(schedules
            .add("bad", "CRON_TZ=Nowhere/Land * * * * *", record("x"))
            .await
            .is_err());
        assert!(schedules
            .add("bad", "every second", record("x"))
            .await
            .is_err());
        assert!(schedules.list().await.unwrap().is_empty());

        schedules
            .add("every-second", "* * * * * *", record("stored"))
            .await
            .unwrap();
        let listed = schedules.list().await.unwrap();
        assert_eq!(
            (
                listed.len(),
                listed[0].task_type.as_str(),
                &listed[0].payload
            ),
            (1, "record", &serde_json::json!({ "label": "stored" }))
        );
        for _ in 0..4 {
            clock.advance(Duration::from_secs(1));
            let run = recv(&mut rx, "a stored schedule's tick", T).await;
            assert_eq!(run.label, "stored");
            db.wait_job(run.id, T, |r| r.status() == JobStatus::Processed)
                .await;
        }
        // Once removed, no worker enqueues its ticks; another schedule's tick shows that the
        // workers went on.
        assert!(schedules.remove("every-second").await.unwrap());
        assert!(!schedules.remove("every-second").await.unwrap());
        schedules
            .add("marker", "* * * * * *", record("marker"))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(1));
        let run = recv(&mut rx, "the marker's tick", T).await;
        assert_eq!(run.label, "marker");
        db.wait_job(run.id, T, |r| r.status() == JobStatus::Processed)
            .await;
        a.stop().await;
        b.stop().await;
        assert!(
            rx.try_recv().is_err(),
            "no tick ran twice, none after the removal"
        );
        let keys = db
            .texts(
                "SELECT task_unique_key FROM sk_task_results_t
                 WHERE task_unique_key LIKE 'sk-schedule:every-second@%' ORDER BY 1",
            )
            .await;
        let ticks: Vec<String> = (1..=4)
            .map(|s| {
                let tick = start.with_nanosecond(0).unwrap() + chrono::Duration::seconds(s);
                format!("sk-schedule:every-second@{}", tick.to_rfc3339())
            })
            .collect();
        assert_eq!(keys, ticks, "one job per tick while the schedule existed");
        db.drop().await;
    }
}
