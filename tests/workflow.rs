//! Workflows: jobs that wait on other jobs and receive their outputs, on every backend.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sk_runtime::testing::{self, Outcome, Runner};
use sk_runtime::{
    job, Client, Data, Input, Inputs, Job, JobError, JobStatus, RescheduleOutcome, Worker, Workflow,
};
use sk_tests::{each_backend, Db, RunningWorker, TestBackend};

use crate::T;

#[job(queue = "images")]
async fn resize(n: i64) -> Result<String, JobError> {
    Ok(format!("thumb-{n}"))
}

/// The fan-in: every thumbnail, in the order the fan-out gave them.
#[job(queue = "albums")]
async fn build_album(name: String, thumbs: Inputs<String>) -> Result<Vec<String>, JobError> {
    let mut album = vec![name];
    album.extend(thumbs);
    Ok(album)
}

#[job]
async fn announce(album: Input<Vec<String>>) -> Result<usize, JobError> {
    Ok(album.len() - 1)
}

/// Fails for good when `fail`, else returns `n`.
#[job(max_attempts = 1)]
async fn step(n: i64, fail: bool) -> Result<i64, JobError> {
    if fail {
        return Err(JobError::fatal(format!("step {n} broke")));
    }
    Ok(n)
}

#[job]
async fn next_step(previous: Input<i64>) -> Result<i64, JobError> {
    Ok(*previous + 1)
}

/// Only waits: it takes no input.
#[job]
async fn cleanup() -> Result<(), JobError> {
    Ok(())
}

fn flow_worker<B: TestBackend>(db: &Db<B>) -> sk_runtime::WorkerBuilder
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    Worker::builder(db.pool.clone())
        .task_types([
            Resize::TASK_TYPE,
            BuildAlbum::TASK_TYPE,
            Announce::TASK_TYPE,
            Step::TASK_TYPE,
            NextStep::TASK_TYPE,
            Cleanup::TASK_TYPE,
        ])
        .poll_interval(Duration::from_millis(50))
}

/// The outputs a job recorded.
fn output<O: serde::de::DeserializeOwned>(record: &sk_runtime::JobRecord) -> O {
    serde_json::from_str(record.output_json.as_deref().expect("an output")).expect("decodes")
}

each_backend! {
    /// 100 fan-out jobs run in parallel on a real worker; the fan-in waits (its own state
    /// in queue info), then receives all 100 outputs in order, and the stage after it
    /// the fan-in's output.
    async fn a_fan_in_receives_every_output_of_its_fan_out(db) {
        let ids = Workflow::fan_out((0..100).map(Resize::new))
            .then(BuildAlbum::new("summer".into()))
            .then(Announce::new())
            .enqueue(&db.pool)
            .await
            .unwrap();
        assert_eq!(ids.stages.iter().map(Vec::len).collect::<Vec<_>>(), [100, 1, 1]);
        let (album, announce) = (ids.stages[1][0], ids.last()[0]);
        assert_eq!(db.job(album).await.status(), JobStatus::Pending);
        let counts = db.info().counts().await.unwrap();
        assert_eq!((counts.pending, counts.scheduled, counts.available), (2, 0, 100));
        assert_eq!(counts.status(JobStatus::Pending), 2);
        // The CLI's and the dashboard's counts show them apart too.
        let client = Client::new(db.pool.clone());
        let by_queue = client.count_by(sk_runtime::CountBy::Queue).await.unwrap();
        let pending: Vec<(Option<&str>, i64, i64)> = by_queue
            .iter()
            .map(|c| (c.key.as_deref(), c.pending, c.scheduled))
            .collect();
        assert_eq!(pending, [(Some("albums"), 1, 0), (Some("default"), 1, 0), (Some("images"), 0, 0)]);
        let queues = client.queues().await.unwrap();
        assert_eq!(queues.iter().map(|q| q.pending).sum::<i64>(), 2);
        // Waiting on others, it cannot be run now.
        assert_eq!(client.run_now(album).await.unwrap(), RescheduleOutcome::WaitingOnDependencies);

        let worker = RunningWorker::start(flow_worker(&db).concurrency(8));
        let done = db.wait_job(announce, T, |r| r.status().is_final()).await;
        worker.stop().await;
        assert_eq!(done.status(), JobStatus::Processed, "{done:?}");
        assert_eq!(output::<usize>(&done), 100);
        let album = db.job(album).await;
        let mut expected = vec!["summer".to_owned()];
        expected.extend((0..100).map(|n| format!("thumb-{n}")));
        assert_eq!(output::<Vec<String>>(&album), expected);
        let counts = db.info().counts().await.unwrap();
        assert_eq!((counts.pending, counts.status(JobStatus::Processed)), (0, 102));
        // A job that succeeded leaves no dependency rows behind.
        let rows = db.scalar("SELECT count(*) FROM sk_task_deps_t", None).await;
        assert_eq!(rows, Some(0));
        db.drop().await;
    }
}

each_backend! {
    /// A dependency that fails for good fails its dependants, and theirs, naming it; a
    /// cancelled one cancels them. Jobs that do not wait on it run.
    async fn a_failed_or_cancelled_dependency_ends_its_dependants(db) {
        let broken = Workflow::start(Step::new(1, true))
            .then(NextStep::new())
            .then(NextStep::new())
            .enqueue(&db.pool)
            .await
            .unwrap();
        let fine = Workflow::start(Step::new(10, false))
            .then(NextStep::new())
            .enqueue(&db.pool)
            .await
            .unwrap();
        // A dependency that will not run before the cancel.
        let later = Step::new(20, false)
            .run_after(Duration::from_secs(3600))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let waits = Cleanup::new().after([later]).enqueue(&db.pool).await.unwrap();
        let after_waits = NextStep::new().after([waits]).enqueue(&db.pool).await.unwrap();

        let worker = flow_worker(&db).build().unwrap();
        let drained = testing::drain(&worker).await.unwrap();
        assert_eq!((drained.succeeded(), drained.failed()), (2, 1), "{drained:?}");

        let [first, second, third] = [broken.stages[0][0], broken.stages[1][0], broken.stages[2][0]];
        assert_eq!(db.job(first).await.status(), JobStatus::Fatal);
        let second = db.job(second).await;
        assert_eq!(second.status(), JobStatus::Fatal);
        assert_eq!(second.last_error_type.as_deref(), Some("dependency_failed"));
        assert_eq!(
            second.last_error_message.as_deref(),
            Some(format!("dependency {first} (step) failed: step 1 broke").as_str())
        );
        // A failed dependant keeps its payload, to inspect or retry.
        assert!(second.payload.is_some());
        let third = db.job(third).await;
        assert_eq!(third.status(), JobStatus::Fatal);
        assert_eq!(
            third.last_error_message.as_deref(),
            Some(format!("dependency {} (next_step) failed: dependency {first} (step) failed: step 1 broke", second.id).as_str())
        );
        assert_eq!(output::<i64>(&db.job(fine.last()[0]).await), 11);

        // The cancel of a dependency cancels what waits on it, in the same call.
        let client = Client::new(db.pool.clone());
        assert_eq!(client.cancel(later).await.unwrap(), sk_runtime::CancelOutcome::Cancelled);
        for (id, on) in [(waits, later), (after_waits, waits)] {
            let record = db.job(id).await;
            assert_eq!(record.status(), JobStatus::Cancelled, "{record:?}");
            assert_eq!(record.last_error_type.as_deref(), Some("dependency_cancelled"));
            assert!(
                record.last_error_message.as_deref().is_some_and(|m| m.starts_with(&format!("dependency {on} "))),
                "{record:?}"
            );
        }
        let counts = db.info().counts().await.unwrap();
        assert_eq!(counts.pending, 0);
        db.drop().await;
    }
}

each_backend! {
    /// `Enqueue::after` takes a dependency that succeeded already (its output is the
    /// input at once) and refuses one that failed, one that does not exist, and a waiting
    /// job with a run-at time; a retried dependant runs again with its inputs.
    async fn after_takes_jobs_by_id(db) {
        let worker = flow_worker(&db).build().unwrap();
        let ok = Step::new(5, false).enqueue(&db.pool).await.unwrap();
        let bad = Step::new(6, true).enqueue(&db.pool).await.unwrap();
        testing::drain(&worker).await.unwrap();

        let next = NextStep::new().after([ok]).enqueue(&db.pool).await.unwrap();
        assert_eq!(db.job(next).await.status(), JobStatus::Unprocessed);
        testing::drain(&worker).await.unwrap();
        assert_eq!(output::<i64>(&db.job(next).await), 6);

        let refused = NextStep::new().after([bad]).enqueue(&db.pool).await.unwrap_err();
        assert!(refused.to_string().contains("failed for good"), "{refused}");
        let missing = uuid::Uuid::now_v7();
        let refused = NextStep::new().after([missing]).enqueue(&db.pool).await.unwrap_err();
        assert!(refused.to_string().contains(&format!("no job {missing}")), "{refused}");
        let live = Step::new(7, false).enqueue(&db.pool).await.unwrap();
        let refused = NextStep::new()
            .run_after(Duration::from_secs(60))
            .after([live])
            .enqueue(&db.pool)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("run-at time"), "{refused}");

        // A stage after an empty one waits on nothing and runs with no inputs.
        let empty = Workflow::fan_out(Vec::<Resize>::new())
            .then(BuildAlbum::new("empty".into()))
            .enqueue(&db.pool)
            .await
            .unwrap();
        testing::drain(&worker).await.unwrap();
        assert_eq!(output::<Vec<String>>(&db.job(empty.last()[0]).await), ["empty"]);

        // A job that takes an input but was enqueued on its own fails, saying why.
        let alone = NextStep::new().enqueue(&db.pool).await.unwrap();
        testing::drain(&worker).await.unwrap();
        let alone = db.job(alone).await;
        assert_eq!(alone.status(), JobStatus::Fatal);
        assert!(alone.last_error_message.as_deref().is_some_and(|m| m.contains("enqueued on its own")), "{alone:?}");
        db.drop().await;
    }
}

/// A unit test gives a job the outputs it would have waited on.
#[tokio::test]
async fn the_runner_gives_a_job_its_inputs() {
    let album = Runner::new()
        .input("a")
        .input("b")
        .perform(BuildAlbum::new("x".into()))
        .await;
    assert_eq!(
        album.output::<Vec<String>>(),
        Some(vec!["x".into(), "a".into(), "b".into()])
    );
    let alone = Runner::new().perform(Announce::new()).await;
    assert!(
        matches!(&alone, Outcome::Failed { error } if error.kind() == "dependency"),
        "{alone:?}"
    );
    let two = Runner::new()
        .input(vec!["a"])
        .input(vec!["b"])
        .perform(Announce::new())
        .await;
    assert!(
        matches!(&two, Outcome::Failed { error } if error.message().contains("waited on 2")),
        "{two:?}"
    );
}

/// Fails for good while the gate is shut; then returns `n`.
#[job(max_attempts = 1)]
async fn flaky_step(n: i64, open: Data<Arc<AtomicBool>>) -> Result<i64, JobError> {
    if !open.load(Ordering::SeqCst) {
        return Err(JobError::fatal(format!("gate {n} is shut")));
    }
    Ok(n)
}

#[job]
async fn total(values: Inputs<i64>) -> Result<i64, JobError> {
    Ok(values.iter().sum())
}

each_backend! {
    /// A retry heals a workflow: the jobs a failed dependency ended wait on it again and
    /// run when it succeeds; a fan-in comes back once every failed branch is retried;
    /// dependants retried with their dependency wait for it; `retry_alone` heals nothing.
    async fn retrying_a_failed_dependency_revives_what_it_ended(db) {
        let open = Arc::new(AtomicBool::new(false));
        let worker = Worker::builder(db.pool.clone())
            .task_types([FlakyStep::TASK_TYPE, NextStep::TASK_TYPE, Total::TASK_TYPE])
            .data(open.clone())
            .build()
            .unwrap();
        let chain = || Workflow::start(FlakyStep::new(1)).then(NextStep::new()).then(NextStep::new());
        let alone = chain().enqueue(&db.pool).await.unwrap();
        let bulk = chain().enqueue(&db.pool).await.unwrap();
        let fan = Workflow::fan_out([FlakyStep::new(10), FlakyStep::new(20)])
            .then(Total::new())
            .enqueue(&db.pool)
            .await
            .unwrap();
        let drained = testing::drain(&worker).await.unwrap();
        assert_eq!(drained.failed(), 4, "{drained:?}");
        let db_ref = &db;
        let status = |id| async move { db_ref.job(id).await.status() };
        for id in [alone.last()[0], bulk.last()[0], fan.last()[0]] {
            assert_eq!(status(id).await, JobStatus::Fatal);
        }
        open.store(true, Ordering::SeqCst);
        let client = Client::new(db.pool.clone());

        // Alone: the dependants stay ended; then a retry of the middle one heals the rest.
        let [a0, a1, a2] = [alone.stages[0][0], alone.stages[1][0], alone.stages[2][0]];
        assert_eq!(client.retry_alone(a0).await.unwrap(), sk_runtime::RetryOutcome::Retried);
        testing::drain(&worker).await.unwrap();
        assert_eq!((status(a0).await, status(a1).await), (JobStatus::Processed, JobStatus::Fatal));
        assert_eq!(client.retry(a1).await.unwrap(), sk_runtime::RetryOutcome::Retried);
        assert_eq!(status(a2).await, JobStatus::Pending, "revived, waiting on a1");
        testing::drain(&worker).await.unwrap();
        assert_eq!(output::<i64>(&db.job(a1).await), 2, "a retried dependant gets its input");
        assert_eq!(output::<i64>(&db.job(a2).await), 3);

        // A fan-in waits for every branch it lost: one retried branch is not enough.
        let [b0, b1, joined] = [fan.stages[0][0], fan.stages[0][1], fan.stages[1][0]];
        client.retry(b0).await.unwrap();
        testing::drain(&worker).await.unwrap();
        assert_eq!((status(b0).await, status(joined).await), (JobStatus::Processed, JobStatus::Fatal));
        client.retry(b1).await.unwrap();
        testing::drain(&worker).await.unwrap();
        assert_eq!(output::<i64>(&db.job(joined).await), 30);

        // Every failed job at once: the dependants wait for their dependency, in order.
        let retried = client.retry_where(&sk_runtime::JobFilter::new().status(JobStatus::Fatal)).await.unwrap();
        assert_eq!(retried, 3);
        assert_eq!(status(bulk.last()[0]).await, JobStatus::Pending);
        let drained = testing::drain(&worker).await.unwrap();
        assert_eq!((drained.succeeded(), drained.failed()), (3, 0), "{drained:?}");
        assert_eq!(output::<i64>(&db.job(bulk.last()[0]).await), 3);
        db.drop().await;
    }
}

/// A job of a batch: fails for good when `fail` until the flag is set.
#[job(queue = "batched", max_attempts = 1)]
async fn member(n: i64, fail: bool, open: Data<Arc<AtomicBool>>) -> Result<i64, JobError> {
    if fail && !open.load(Ordering::SeqCst) {
        return Err(JobError::fatal(format!("member {n} broke")));
    }
    Ok(n)
}

/// The callbacks that ran: (tag, the batch's counts).
type Called = Arc<std::sync::Mutex<Vec<(String, sk_runtime::BatchDone)>>>;

#[job(queue = "batched")]
async fn called_back(
    tag: String,
    batch: sk_runtime::BatchDone,
    called: Data<Called>,
) -> Result<(), JobError> {
    called.lock().unwrap().push((tag, batch));
    Ok(())
}

fn with_callbacks(batch: sk_runtime::Batch, name: &str) -> sk_runtime::Batch {
    batch
        .on_success(CalledBack::new(format!("{name}-success")))
        .on_complete(CalledBack::new(format!("{name}-complete")))
        .on_death(CalledBack::new(format!("{name}-death")))
}

each_backend! {
    /// A batch's callbacks run once each when their event comes, with the batch's counts;
    /// an operator's retry of the failed job brings the success callback, and no other
    /// again; the client shows the batch; a batch it cannot store is refused whole.
    async fn a_batch_runs_each_callback_once_with_its_counts(db) {
        use sk_runtime::{Batch, BatchEvent, BatchJobs};
        let open = Arc::new(AtomicBool::new(false));
        let called = Called::default();
        let worker = Worker::builder(db.pool.clone())
            .task_types([Member::TASK_TYPE, CalledBack::TASK_TYPE])
            .data(open.clone())
            .data(called.clone())
            .build()
            .unwrap();
        let good = with_callbacks(Batch::new().add_all((0..5).map(|n| Member::new(n, false))), "good")
            .description("five that succeed")
            .enqueue(&db.pool)
            .await
            .unwrap();
        let bad = with_callbacks(
            Batch::new().add_all((0..3).map(|n| Member::new(n, false))).add(Member::new(3, true)),
            "bad",
        )
        .enqueue(&db.pool)
        .await
        .unwrap();
        assert_eq!((good.jobs.len(), good.callbacks.len()), (5, 3));
        testing::drain(&worker).await.unwrap();
        let tags = |called: &Called| {
            let mut tags: Vec<String> = called.lock().unwrap().iter().map(|c| c.0.clone()).collect();
            tags.sort();
            tags
        };
        assert_eq!(tags(&called), ["bad-complete", "bad-death", "good-complete", "good-success"]);
        let counts = |tag: &str| {
            let called = called.lock().unwrap();
            let done = &called.iter().find(|c| c.0 == tag).unwrap().1;
            (done.total, done.succeeded, done.failed, done.cancelled)
        };
        assert_eq!(counts("good-success"), (5, 5, 0, 0));
        assert_eq!(counts("bad-complete"), (4, 3, 1, 0));
        let client = Client::new(db.pool.clone());
        let record = client.batch(bad.batch).await.unwrap().unwrap();
        assert_eq!((record.total, record.pending, record.succeeded, record.failed), (4, 0, 3, 1));
        assert!(record.finished_at.is_some());
        let posted: Vec<(BatchEvent, bool)> =
            record.callbacks.iter().map(|c| (c.event, c.posted_at.is_some())).collect();
        assert_eq!(
            posted,
            [(BatchEvent::Success, false), (BatchEvent::Complete, true), (BatchEvent::Death, true)]
        );
        let failed = client.batch_jobs(bad.batch, BatchJobs::Failed, None, 10).await.unwrap();
        assert_eq!(failed, [bad.jobs[3]]);
        // The callback job is an ordinary job once posted, with the id given at enqueue.
        let complete = record.callbacks[1].job_id;
        assert_eq!(db.job(complete).await.status(), JobStatus::Processed);

        // `sk` and the dashboard show it.
        let mut out = Vec::new();
        let code = sk_cli::run(
            vec!["sk", "--database-url", db.url.as_str(), "batch", &bad.batch.to_string()],
            &mut out,
            &mut Vec::new(),
        )
        .await;
        let shown = String::from_utf8(out).unwrap();
        assert_eq!(code, 0);
        assert!(shown.contains("│ failed      ┆ 1"), "{shown}");
        assert!(shown.contains("│ success  ┆") && shown.contains("waiting"), "{shown}");
        let url = crate::web::serve(client.clone(), sk_cli::web::WebOptions::default()).await;
        let (status, list) = crate::web::request(&url, "GET", "/batches", "").await;
        assert_eq!(status, 200, "{list}");
        assert!(list.contains(&bad.batch.to_string()) && list.contains(&good.batch.to_string()));
        let path = format!("/batches/{}", bad.batch);
        let (status, page) = crate::web::request(&url, "GET", &path, "").await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains(&format!("/jobs/{}", bad.jobs[3])), "the failed job, linked: {page}");
        assert!(page.contains(&format!("/jobs/{complete}")), "the posted callback, linked");

        // The failed job retried from the dashboard: pending again, then its success
        // brings the success callback, and neither the complete nor the death callback
        // again.
        open.store(true, Ordering::SeqCst);
        let at = page.find("name=\"csrf\" value=\"").expect("a form") + 19;
        let form = format!("csrf={}", &page[at..at + 64]);
        let host = url.trim_start_matches("http://");
        let own = format!("Host: {host}\r\nOrigin: {url}\r\n");
        let (status, body) = crate::web::send(&url, "POST", &format!("{path}/retry"), &own, &form).await;
        assert_eq!(status, 303, "{body}");
        let record = client.batch(bad.batch).await.unwrap().unwrap();
        assert_eq!((record.pending, record.failed, record.finished_at), (1, 0, None));
        testing::drain(&worker).await.unwrap();
        assert_eq!(
            tags(&called),
            ["bad-complete", "bad-death", "bad-success", "good-complete", "good-success"]
        );
        assert_eq!(counts("bad-success"), (4, 4, 0, 0));
        let listed: Vec<uuid::Uuid> = client.batches(10).await.unwrap().iter().map(|b| b.id).collect();
        assert_eq!(listed, [bad.batch, good.batch]);
        assert_eq!(
            client.batch(good.batch).await.unwrap().unwrap().description.as_deref(),
            Some("five that succeed")
        );

        // Cancelling what is left completes a batch.
        let held = with_callbacks(Batch::new().add(Member::new(9, false).run_after(Duration::from_secs(3600))), "held")
            .enqueue(&db.pool)
            .await
            .unwrap();
        assert_eq!(client.cancel_batch(held.batch).await.unwrap(), 1);
        testing::drain(&worker).await.unwrap();
        assert!(tags(&called).contains(&"held-complete".to_owned()));
        assert_eq!(counts("held-complete"), (1, 0, 0, 1));

        // Refused whole: no job, a keyed job, a delayed callback, a job that waits.
        let before = client.batches(100).await.unwrap().len();
        let invalid = |e: sk_runtime::Error| matches!(e, sk_runtime::Error::Invalid { what: "batch", .. });
        assert!(invalid(Batch::new().enqueue(&db.pool).await.unwrap_err()));
        let keyed = Batch::new().add(Member::new(1, false)).add(Member::new(2, false).with_unique_key("k"));
        assert!(invalid(keyed.enqueue(&db.pool).await.unwrap_err()));
        let late = Batch::new()
            .add(Member::new(1, false))
            .on_complete(CalledBack::new("late".into()).run_after(Duration::from_secs(60)));
        assert!(invalid(late.enqueue(&db.pool).await.unwrap_err()));
        let waits = Batch::new().add(Member::new(1, false).after([good.jobs[0]]));
        assert!(invalid(waits.enqueue(&db.pool).await.unwrap_err()));
        assert_eq!(client.batches(100).await.unwrap().len(), before);
        assert!(db.info().peek(10).await.unwrap().is_empty(), "nothing of a refused batch was stored");
        // Finished batches go with the results they counted.
        client.prune(chrono::Utc::now() + chrono::Duration::hours(1)).await.unwrap();
        assert!(client.batches(100).await.unwrap().is_empty(), "finished batches pruned");
        db.drop().await;
    }
}

#[job(queue = "wide")]
async fn wide_member(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// A batch of 100,000 jobs completes, counted in the completions' transactions, and its
/// callbacks run once with the whole count (PostgreSQL; `examples/bench --only batch`
/// measures its cost on every backend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_100_000_jobs_completes_once() {
    const JOBS: u32 = 100_000;
    let db = sk_tests::Db::<sqlx::Postgres>::new().await;
    let called = Called::default();
    let started = std::time::Instant::now();
    let ids = sk_runtime::Batch::new()
        .add_all((0..JOBS).map(WideMember::new))
        .on_success(CalledBack::new("wide-success".into()))
        .on_complete(CalledBack::new("wide-complete".into()))
        .enqueue(&db.pool)
        .await
        .unwrap();
    let enqueued = started.elapsed();
    let w = RunningWorker::start(
        Worker::builder(db.pool.clone())
            .task_types([WideMember::TASK_TYPE, CalledBack::TASK_TYPE])
            .concurrency(64)
            .data(called.clone()),
    );
    let client = Client::new(db.pool.clone());
    // A callback's job exists once its event has come.
    sk_tests::wait_until(
        "the batch's callbacks posted",
        Duration::from_secs(300),
        || {
            let client = client.clone();
            async move {
                let record = client.batch(ids.batch).await.unwrap().unwrap();
                record
                    .callbacks
                    .iter()
                    .all(|c| c.posted_at.is_some())
                    .then_some(())
            }
        },
    )
    .await;
    for (_, callback) in &ids.callbacks {
        client.wait(*callback, T).await.unwrap();
    }
    w.stop().await;
    let record = client.batch(ids.batch).await.unwrap().unwrap();
    assert_eq!(
        (record.total, record.succeeded, record.pending),
        (100_000, 100_000, 0)
    );
    let called = called.lock().unwrap().clone();
    assert_eq!(called.len(), 2, "each callback once");
    assert!(called
        .iter()
        .all(|(_, done)| done.succeeded == 100_000 && done.total == 100_000));
    eprintln!(
        "a batch of {JOBS}: enqueued in {enqueued:?}, done in {:?}",
        started.elapsed()
    );
    db.drop().await;
}

each_backend! {
    /// A workflow stays on record with its stages: `Client::workflow_jobs` gives each job's
    /// state now; its dashboard page draws the graph and retries what failed (the first
    /// stage's failures, the later stages healing); pruning its jobs forgets it.
    async fn a_workflow_is_on_record_and_its_page_retries_what_failed(db) {
        let open = Arc::new(AtomicBool::new(false));
        let worker = Worker::builder(db.pool.clone())
            .task_types([FlakyStep::TASK_TYPE, NextStep::TASK_TYPE, Total::TASK_TYPE])
            .data(open.clone())
            .build()
            .unwrap();
        let ids = Workflow::fan_out([FlakyStep::new(1), FlakyStep::new(2)])
            .then(Total::new())
            .then(NextStep::new())
            .enqueue(&db.pool)
            .await
            .unwrap();
        let client = Client::new(db.pool.clone());
        let record = client.workflow(ids.workflow).await.unwrap().expect("on record");
        assert_eq!((record.stages, record.jobs), (3, 4));
        let states = || async {
            client
                .workflow_jobs(ids.workflow)
                .await
                .unwrap()
                .iter()
                .map(|j| (j.stage, j.status))
                .collect::<Vec<_>>()
        };
        let (waiting, pending) = (Some(JobStatus::Unprocessed), Some(JobStatus::Pending));
        assert_eq!(states().await, [(0, waiting), (0, waiting), (1, pending), (2, pending)]);
        testing::drain(&worker).await.unwrap();
        let fatal = Some(JobStatus::Fatal);
        assert_eq!(states().await, [(0, fatal), (0, fatal), (1, fatal), (2, fatal)]);
        let jobs = client.workflow_jobs(ids.workflow).await.unwrap();
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), ids.stages.concat());
        assert_eq!(jobs[2].task_type.as_deref(), Some(Total::TASK_TYPE));
        assert_eq!(client.workflows(10).await.unwrap().first().map(|w| w.id), Some(ids.workflow));

        // The dashboard: listed, drawn with a node per job, retried from its page.
        let url = crate::web::serve(client.clone(), sk_cli::web::WebOptions::default()).await;
        let (status, list) = crate::web::request(&url, "GET", "/workflows", "").await;
        assert_eq!(status, 200, "{list}");
        assert!(list.contains(&format!("/workflows/{}", ids.workflow)), "{list}");
        let path = format!("/workflows/{}", ids.workflow);
        let (status, page) = crate::web::request(&url, "GET", &path, "").await;
        assert_eq!(status, 200, "{page}");
        for id in ids.stages.concat() {
            assert!(page.contains(&format!("data-job=\"{id}\"")), "a node for {id}: {page}");
        }
        assert_eq!(page.matches("<line class=\"edge\"").count(), 3, "2 → 1 → 1: {page}");
        open.store(true, Ordering::SeqCst);
        let at = page.find("name=\"csrf\" value=\"").expect("a form") + 19;
        let form = format!("csrf={}", &page[at..at + 64]);
        let host = url.trim_start_matches("http://");
        let own = format!("Host: {host}\r\nOrigin: {url}\r\n");
        let (status, body) = crate::web::send(&url, "POST", &format!("{path}/retry"), &own, &form).await;
        assert_eq!(status, 303, "{body}");
        assert_eq!(states().await, [(0, waiting), (0, waiting), (1, pending), (2, pending)]);
        let drained = testing::drain(&worker).await.unwrap();
        assert_eq!((drained.succeeded(), drained.failed()), (4, 0), "{drained:?}");
        assert_eq!(output::<i64>(&db.job(ids.last()[0]).await), 4);
        let retried = client.audit(None, 1).await.unwrap();
        assert_eq!(retried[0].action, "retry-workflow");
        assert_eq!(retried[0].jobs, Some(2));
        let (status, _) = crate::web::request(&url, "GET", &format!("/workflows/{}", uuid::Uuid::nil()), "").await;
        assert_eq!(status, 404);

        // Pruned, it is forgotten.
        client.prune(chrono::Utc::now() + chrono::Duration::seconds(1)).await.unwrap();
        assert_eq!(client.workflow(ids.workflow).await.unwrap(), None);
        assert!(client.workflow_jobs(ids.workflow).await.unwrap().is_empty());
        db.drop().await;
    }
}
