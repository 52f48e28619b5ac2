//! A job's life open to the application: layers around every run (`WorkerBuilder::layer`,
//! `layer_for`). A module of the `queue` test binary.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sk_runtime::{
    job, Client, Data, Enqueue, Error, Job, JobContext, JobError, JobStatus, Layer, LayerFuture,
    Next,
};
use sk_tests::{each_backend, RunningWorker};

use super::{worker, T};

/// What the layers and handlers saw, in order: (who, the job's tenant).
type Seen = Arc<Mutex<Vec<(&'static str, String)>>>;

/// A job that fails for tenant "forgiven", and records its run.
#[job(queue = "layered", tenant = tenant, max_attempts = 1)]
async fn layered_job(tenant: String, seen: Data<Seen>) -> Result<(), JobError> {
    seen.lock().unwrap().push(("handler", tenant.clone()));
    if tenant == "forgiven" {
        return Err(JobError::new("the downstream said no"));
    }
    Ok(())
}

/// A job of another type, which only the worker's layer wraps.
#[job(queue = "layered", tenant = tenant)]
async fn plain_job(tenant: String, seen: Data<Seen>) -> Result<(), JobError> {
    seen.lock().unwrap().push(("plain", tenant));
    Ok(())
}

/// Every job of the worker: refuses the suspended tenant's, records the others' start
/// and end around the rest.
struct Outer(Seen);

impl Layer for Outer {
    fn around<'a>(&'a self, ctx: &'a JobContext, next: Next<'a>) -> LayerFuture<'a> {
        Box::pin(async move {
            let tenant = ctx.tenant().unwrap_or_default().to_owned();
            if tenant == "suspended" {
                return Err(JobError::fatal("the tenant is suspended").with_kind("refused"));
            }
            self.0.lock().unwrap().push(("outer in", tenant.clone()));
            let outcome = next.run().await;
            self.0.lock().unwrap().push(("outer out", tenant));
            outcome
        })
    }
}

/// `LayeredJob` only: delays each job of tenant "later" once (no attempt used), and
/// turns the handler's failure into a success for tenant "forgiven".
struct Inner {
    seen: Seen,
    delayed: Mutex<HashSet<uuid::Uuid>>,
}

impl Layer for Inner {
    fn around<'a>(&'a self, ctx: &'a JobContext, next: Next<'a>) -> LayerFuture<'a> {
        Box::pin(async move {
            let tenant = ctx.tenant().unwrap_or_default().to_owned();
            if tenant == "later" && self.delayed.lock().unwrap().insert(ctx.id()) {
                return Err(JobError::snooze(Duration::from_millis(50)));
            }
            self.seen.lock().unwrap().push(("inner", tenant.clone()));
            match next.run().await {
                Err(_) if tenant == "forgiven" => Ok(None),
                outcome => outcome,
            }
        })
    }
}

each_backend! {
    async fn layers_wrap_every_run_and_may_refuse_delay_or_change_it(db) {
        let client = Client::new(db.pool.clone());
        let seen = Seen::default();
        // A job type's layers are checked against the job types the worker runs.
        let wrong = worker(&db, &[PlainJob::TASK_TYPE])
            .data(Seen::default())
            .layer_for::<LayeredJob>(Inner { seen: Seen::default(), delayed: Mutex::default() })
            .build();
        assert!(matches!(wrong, Err(Error::Invalid { what: "layer", .. })));

        let mut ids = Vec::new();
        for tenant in ["ok", "suspended", "later", "forgiven"] {
            let job = LayeredJob::new(tenant.into());
            ids.push(Enqueue::new(job).enqueue(&db.pool).await.unwrap());
        }
        ids.push(PlainJob::new("plain".into()).enqueue(&db.pool).await.unwrap());
        let built = worker(&db, &[LayeredJob::TASK_TYPE, PlainJob::TASK_TYPE])
            .concurrency(1)
            .data(Arc::clone(&seen))
            .layer(Outer(Arc::clone(&seen)))
            .layer_for::<LayeredJob>(Inner { seen: Arc::clone(&seen), delayed: Mutex::default() })
            .build()
            .unwrap();
        let mut events = built.subscribe();
        let w = RunningWorker::from_worker(built);
        for id in &ids {
            client.wait(*id, T).await.unwrap();
        }
        w.stop().await;
        // A run a layer refuses or delays starts no handler, and says so: one start for
        // each handler run (the refused job none, the delayed one once).
        let mut started = HashMap::new();
        while let Ok(event) = events.try_recv() {
            if event.kind == sk_runtime::JobEventKind::Started {
                *started.entry(event.id).or_insert(0) += 1;
            }
        }
        let starts: Vec<i32> = ids.iter().map(|id| started.get(id).copied().unwrap_or(0)).collect();
        assert_eq!(starts, [1, 0, 1, 1, 1], "starts of ok, suspended, later, forgiven, plain");

        let status = |i: usize| {
            let client = client.clone();
            let id = ids[i];
            async move { client.job(id).await.unwrap().unwrap() }
        };
        assert_eq!(status(0).await.status(), JobStatus::Processed);
        // Refused: fatal with the layer's error, its handler never ran.
        let refused = status(1).await;
        assert_eq!(refused.status(), JobStatus::Fatal);
        assert_eq!(refused.last_error_type.as_deref(), Some("refused"));
        // Delayed once, then run, on its first attempt.
        let later = status(2).await;
        assert_eq!(later.status(), JobStatus::Processed);
        assert_eq!(later.attempts().len(), 1, "{:?}", later.attempts());
        // The handler's failure, turned into a success by the job type's layer.
        assert_eq!(status(3).await.status(), JobStatus::Processed);
        assert_eq!(status(4).await.status(), JobStatus::Processed);

        let seen = seen.lock().unwrap().clone();
        let of = |tenant: &str| -> Vec<&str> {
            seen.iter().filter(|(_, t)| t == tenant).map(|(who, _)| *who).collect()
        };
        // The worker's layer outermost, then the job type's, then the handler.
        assert_eq!(of("ok"), ["outer in", "inner", "handler", "outer out"]);
        assert_eq!(of("suspended"), Vec::<&str>::new());
        assert_eq!(of("later"), ["outer in", "outer out", "outer in", "inner", "handler", "outer out"]);
        assert_eq!(of("forgiven"), ["outer in", "inner", "handler", "outer out"]);
        // Another job type: the worker's layer only.
        assert_eq!(of("plain"), ["outer in", "plain", "outer out"]);
        db.drop().await;
    }
}

/// Writes `label` into table `written` in its own transaction, then fails if `fail`.
#[job(queue = "layered_tx", max_attempts = 1)]
async fn writes_in_its_transaction(
    label: String,
    fail: bool,
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
) -> Result<(), JobError> {
    sqlx::query("INSERT INTO written (label) VALUES (?)")
        .bind(&label)
        .execute(&mut **tx)
        .await?;
    if fail {
        return Err(JobError::new("failed after writing"));
    }
    Ok(())
}

/// Returns the opposite of the run's outcome.
struct Contrary;

impl Layer for Contrary {
    fn around<'a>(&'a self, _ctx: &'a JobContext, next: Next<'a>) -> LayerFuture<'a> {
        Box::pin(async move {
            match next.run().await {
                Ok(_) => Err(JobError::fatal("the layer says no")),
                Err(_) => Ok(None),
            }
        })
    }
}

/// A success committed with the job's transaction stands, whatever a layer returns over
/// it; a success a layer returns over the handler's failure is recorded, without the
/// handler's writes, which rolled back. (The executor decides this the same way on every
/// backend; SQLite's transaction jobs stand for them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_cannot_undo_a_committed_success() {
    let db = sk_tests::Db::<sqlx::Sqlite>::new().await;
    sqlx::query("CREATE TABLE written (label TEXT NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let client = Client::new(db.pool.clone());
    let kept = WritesInItsTransaction::new("kept".into(), false)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let forgiven = WritesInItsTransaction::new("rolled back".into(), true)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[WritesInItsTransaction::TASK_TYPE]).layer(Contrary));
    for id in [kept, forgiven] {
        client.wait(id, T).await.unwrap();
    }
    w.stop().await;
    for id in [kept, forgiven] {
        let record = client.job(id).await.unwrap().unwrap();
        assert_eq!(record.status(), JobStatus::Processed, "{id}: {record:?}");
    }
    let written: Vec<String> = sqlx::query_scalar("SELECT label FROM written")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(written, ["kept"]);
    db.drop().await;
}

/// Which runs of `evented` snoozed already (each snoozes once).
type Snoozed = Arc<Mutex<HashSet<u32>>>;

/// Job `n`: 0 succeeds; 1 fails on its first attempt, then succeeds; 2 fails for good; 3
/// snoozes once, then succeeds; 4 waits for an operator's cancel.
#[job(
    queue = "evented",
    max_attempts = 3,
    backoff = "constant",
    backoff_base = "50ms"
)]
async fn evented(n: u32, ctx: JobContext, snoozed: Data<Snoozed>) -> Result<(), JobError> {
    match n {
        1 if ctx.attempt() == 1 => Err(JobError::new("first try fails")),
        2 => Err(JobError::fatal("never works")),
        3 if snoozed.lock().unwrap().insert(n) => Err(JobError::snooze(Duration::from_millis(50))),
        4 => {
            ctx.cancelled().await;
            Err(JobError::new("stopped because asked to"))
        }
        _ => Ok(()),
    }
}

each_backend! {
    async fn a_subscriber_sees_each_run_start_and_end(db) {
        use sk_runtime::JobEventKind as K;
        let client = Client::new(db.pool.clone());
        let mut ids = Vec::new();
        for n in 0..5 {
            ids.push(Evented::new(n).enqueue(&db.pool).await.unwrap());
        }
        let built = worker(&db, &[Evented::TASK_TYPE])
            .concurrency(5)
            .data(Snoozed::default())
            .build()
            .unwrap();
        let mut events = built.subscribe();
        let w = RunningWorker::from_worker(built);
        let mut seen: std::collections::HashMap<uuid::Uuid, Vec<(K, i32)>> = Default::default();
        let mut cancelled = false;
        let ended = |seen: &std::collections::HashMap<uuid::Uuid, Vec<(K, i32)>>, id| {
            seen.get(id).and_then(|e| e.last()).is_some_and(|(k, _)| {
                matches!(k, K::Succeeded | K::Failed | K::Cancelled)
            })
        };
        while !ids.iter().all(|id| ended(&seen, id)) {
            let event = tokio::time::timeout(T, events.recv()).await.expect("an event").unwrap();
            assert_eq!((event.task_type, &*event.queue), (Evented::TASK_TYPE, "evented"));
            if event.id == ids[4] && event.kind == K::Started && !cancelled {
                client.cancel(ids[4]).await.unwrap();
                cancelled = true;
            }
            seen.entry(event.id).or_default().push((event.kind, event.attempt));
        }
        w.stop().await;
        let kinds = |i: usize| -> Vec<(K, i32)> {
            seen[&ids[i]].iter().map(|(k, a)| (match k {
                K::Retried { .. } => K::Retried { at: chrono::DateTime::UNIX_EPOCH },
                K::Snoozed { .. } => K::Snoozed { until: chrono::DateTime::UNIX_EPOCH },
                other => other.clone(),
            }, *a)).collect()
        };
        let (retried, snoozed) = (
            K::Retried { at: chrono::DateTime::UNIX_EPOCH },
            K::Snoozed { until: chrono::DateTime::UNIX_EPOCH },
        );
        assert_eq!(kinds(0), [(K::Started, 1), (K::Succeeded, 1)]);
        assert_eq!(kinds(1), [(K::Started, 1), (retried, 1), (K::Started, 2), (K::Succeeded, 2)]);
        assert_eq!(kinds(2), [(K::Started, 1), (K::Failed, 1)]);
        assert_eq!(kinds(3), [(K::Started, 1), (snoozed, 1), (K::Started, 1), (K::Succeeded, 1)]);
        assert_eq!(kinds(4), [(K::Started, 1), (K::Cancelled, 1)]);
        db.drop().await;
    }
}

/// A subscriber that does not keep up misses the oldest events and is told how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_is_told_how_many_events_it_missed() {
    let db = sk_tests::Db::<sqlx::Sqlite>::new().await;
    let client = Client::new(db.pool.clone());
    let jobs = (0..2_100).map(|_| Evented::new(0)).collect::<Vec<_>>();
    let ids = Evented::enqueue_many(&db.pool, jobs).await.unwrap();
    let built = worker(&db, &[Evented::TASK_TYPE])
        .concurrency(16)
        .data(Snoozed::default())
        .build()
        .unwrap();
    let mut events = built.subscribe();
    let w = RunningWorker::from_worker(built);
    for id in &ids {
        client.wait(*id, T).await.unwrap();
    }
    w.stop().await;
    // 4,200 events (a start and a success each) into a buffer of 4,096, none read.
    match events.recv().await {
        Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
            assert_eq!(missed, 4_200 - 4_096);
        }
        other => panic!("expected the count of missed events, got {other:?}"),
    }
    db.drop().await;
}

/// Succeeds, or fails for good when told to.
#[job(queue = "published", max_attempts = 1)]
async fn published(fail: bool) -> Result<(), JobError> {
    if fail {
        return Err(JobError::fatal("told to fail"));
    }
    Ok(())
}

/// A worker that publishes its events (PostgreSQL) reaches a client of another "process"
/// (its own connection, no shared state): each job's start, then its outcome, with its
/// type, queue and error. SQLite and MySQL refuse it, on both sides, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_receives_the_events_a_worker_publishes() {
    use sk_runtime::JobEventKind;
    let db = sk_tests::Db::<sqlx::Postgres>::new().await;
    let mut events = Client::new(db.pool.clone()).subscribe().await.unwrap();
    let w = RunningWorker::start(worker(&db, &[Published::TASK_TYPE]).publish_events());
    let ok = Published::new(false).enqueue(&db.pool).await.unwrap();
    let bad = Published::new(true).enqueue(&db.pool).await.unwrap();
    let mut seen: Vec<(uuid::Uuid, JobEventKind)> = Vec::new();
    let done = |seen: &[(uuid::Uuid, JobEventKind)]| {
        seen.contains(&(ok, JobEventKind::Succeeded)) && seen.contains(&(bad, JobEventKind::Failed))
    };
    while !done(&seen) {
        let event = tokio::time::timeout(T, events.recv())
            .await
            .expect("the events in time")
            .unwrap();
        assert_eq!(
            (event.task_type, &*event.queue),
            (Published::TASK_TYPE, "published")
        );
        if event.id == bad && event.kind == JobEventKind::Failed {
            assert_eq!(event.error.as_deref(), Some("told to fail"));
        }
        seen.push((event.id, event.kind));
    }
    for id in [ok, bad] {
        let of: Vec<&JobEventKind> = seen.iter().filter(|s| s.0 == id).map(|s| &s.1).collect();
        assert_eq!(of[0], &JobEventKind::Started, "its start first: {of:?}");
        assert_eq!(of.len(), 2, "{of:?}");
    }
    w.stop().await;
    db.drop().await;

    let lite = sk_tests::Db::<sqlx::Sqlite>::new().await;
    let refused = |e: Error| matches!(e, Error::Invalid { what: "events", .. });
    assert!(refused(
        Client::new(lite.pool.clone())
            .subscribe()
            .await
            .unwrap_err()
    ));
    let built = worker(&lite, &[Published::TASK_TYPE])
        .publish_events()
        .build();
    assert!(refused(built.err().expect("refused on SQLite")));
    lite.drop().await;
}

/// A job the test's enqueue hook acts on (it leaves every other job of the process as it
/// is: the hook is the process's, and the other tests run beside this one).
#[job(queue = "hooked")]
async fn hooked(n: u32) -> Result<u32, JobError> {
    Ok(n)
}

/// Sets a correlation id and metadata on every `Hooked` job, refuses 13, moves 7 to 8
/// at the first priority, and gives 99 an empty tenant.
struct Conventions;

impl sk_runtime::EnqueueHook for Conventions {
    fn on_enqueue(&self, job: &mut sk_runtime::Posting<'_>) -> Result<(), String> {
        if job.task_type() != Hooked::TASK_TYPE {
            return Ok(());
        }
        let n = job.payload()["n"].as_u64();
        if n == Some(13) {
            return Err("13 is unlucky".into());
        }
        if job.correlation_id().is_none() {
            job.set_correlation_id(Some("from the hook".into()));
        }
        job.set_metadata("app", "tests".into());
        if n == Some(7) {
            job.set_payload(&serde_json::json!({ "n": 8 }));
            job.set_priority(-1);
        }
        if n == Some(99) {
            job.set_tenant(Some(String::new()));
        }
        Ok(())
    }
}

static HOOKED: std::sync::Once = std::sync::Once::new();

each_backend! {
    async fn an_enqueue_hook_sets_conventions_and_refuses_jobs(db) {
        HOOKED.call_once(|| sk_runtime::add_enqueue_hook(Conventions));
        let client = Client::new(db.pool.clone());
        let plain = Hooked::new(1).enqueue(&db.pool).await.unwrap();
        let record = client.job(plain).await.unwrap().unwrap();
        assert_eq!(record.correlation_id.as_deref(), Some("from the hook"));
        let metadata: serde_json::Value = serde_json::from_str(record.metadata.as_deref().unwrap()).unwrap();
        assert_eq!(metadata["app"], "tests", "{metadata}");
        // One the caller named keeps its own.
        let named = Enqueue::new(Hooked::new(2)).with_correlation_id("mine").enqueue(&db.pool);
        let named = client.job(named.await.unwrap()).await.unwrap().unwrap();
        assert_eq!(named.correlation_id.as_deref(), Some("mine"));
        // Changed arguments and priority, as stored and as run.
        let moved = Hooked::new(7).enqueue(&db.pool).await.unwrap();
        let record = client.job(moved).await.unwrap().unwrap();
        assert_eq!((record.payload.as_deref(), record.priority), (Some(r#"{"n":8}"#), -1));
        // Refused, alone, in a batch and by name: nothing of it stored.
        let before = client.jobs(&sk_runtime::JobFilter::default(), None, 100).await.unwrap().jobs.len();
        for refused in [
            Hooked::new(13).enqueue(&db.pool).await.map(|_| ()),
            Hooked::enqueue_many(&db.pool, [Hooked::new(3), Hooked::new(13)]).await.map(|_| ()),
            client.enqueue_json("hooked", serde_json::json!({ "n": 13 })).await.map(|_| ()),
        ] {
            match refused {
                Err(Error::Invalid { what: "enqueue hook", reason }) => {
                    assert_eq!(reason, "refused job `hooked`: 13 is unlucky");
                }
                other => panic!("expected the hook's refusal, got {other:?}"),
            }
        }
        let after = client.jobs(&sk_runtime::JobFilter::default(), None, 100).await.unwrap().jobs.len();
        assert_eq!(before, after, "nothing refused was stored");
        // What a hook sets is checked as any enqueue's.
        assert!(matches!(
            Hooked::new(99).enqueue(&db.pool).await,
            Err(Error::Invalid { what: "tenant", .. })
        ));
        let w = RunningWorker::start(worker(&db, &[Hooked::TASK_TYPE]));
        let ran = client.wait(moved, T).await.unwrap();
        assert_eq!(ran.output::<u32>().unwrap(), Some(8));
        w.stop().await;
        db.drop().await;
    }
}

/// Reports its progress 100 times at once, says so, then waits for the gate.
#[job(queue = "progress")]
async fn reports(
    ctx: JobContext,
    said: Data<tokio::sync::mpsc::UnboundedSender<std::time::Instant>>,
    gate: Data<tokio::sync::watch::Receiver<bool>>,
) -> Result<(), JobError> {
    let first = std::time::Instant::now();
    for done in 0..100 {
        ctx.progress(serde_json::json!({ "done": done, "of": 100 }))
            .await?;
    }
    let _ = said.send(first);
    let mut gate = (*gate).clone();
    let _ = gate.wait_for(|open| *open).await;
    Ok(())
}

each_backend! {
    async fn progress_is_written_at_once_then_at_most_once_a_second(db) {
        let client = Client::new(db.pool.clone());
        let id = Reports::new().enqueue(&db.pool).await.unwrap();
        let (said, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let (open, gate) = tokio::sync::watch::channel(false);
        let w = RunningWorker::start(
            worker(&db, &[Reports::TASK_TYPE]).data(said).data(gate),
        );
        let first: std::time::Instant = tokio::time::timeout(T, heard.recv()).await.unwrap().unwrap();
        let progress = client.job(id).await.unwrap().unwrap().progress();
        // The first value at once; the 99 after it held back until a second has passed
        // (checked only while it has not: a machine that stalled may be past it).
        if first.elapsed() < Duration::from_millis(800) {
            assert_eq!(progress, Some(serde_json::json!({ "done": 0, "of": 100 })));
        }
        let last = serde_json::json!({ "done": 99, "of": 100 });
        sk_tests::wait_until("the latest progress", T, || {
            let (client, last) = (client.clone(), last.clone());
            async move { (client.job(id).await.unwrap().unwrap().progress() == Some(last)).then_some(()) }
        })
        .await;
        assert!(first.elapsed() >= sk_runtime::PROGRESS_EVERY, "written before its second");
        // The dashboard's overview shows it running, with its progress as a bar.
        let url = crate::web::serve(client.clone(), sk_cli::web::WebOptions::default()).await;
        let (status, overview) = crate::web::request(&url, "GET", "/", "").await;
        assert_eq!(status, 200, "{overview}");
        assert!(overview.contains(&format!("/jobs/{id}")), "{overview}");
        assert!(overview.contains(r#"<progress value="99" max="100">"#), "{overview}");
        open.send(true).unwrap();
        client.wait(id, T).await.unwrap();
        w.stop().await;
        // Kept after it ended; and a value too large is refused.
        assert_eq!(client.job(id).await.unwrap().unwrap().progress(), Some(last));
        let runner = sk_runtime::testing::Runner::new();
        let big = "x".repeat(sk_runtime::MAX_PROGRESS_BYTES);
        assert!(matches!(
            runner.context::<Reports>().progress(big).await,
            Err(Error::Invalid { what: "progress", .. })
        ));
        db.drop().await;
    }
}

/// What `sk job ID` prints.
async fn sk_job(url: &str, id: uuid::Uuid) -> String {
    let id = id.to_string();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = sk_cli::run(
        vec!["sk", "--database-url", url, "job", &id],
        &mut out,
        &mut err,
    )
    .await;
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    String::from_utf8(out).unwrap()
}

/// The runs of each step: (job, step, attempt).
type StepRuns = Arc<Mutex<Vec<(uuid::Uuid, &'static str, i32)>>>;

/// Three steps; the second fails on the job's first attempt.
#[job(
    queue = "stepped",
    max_attempts = 3,
    backoff = "constant",
    backoff_base = "10ms"
)]
async fn stepped(base: u32, ctx: JobContext, runs: Data<StepRuns>) -> Result<u32, JobError> {
    let ran = |step| runs.lock().unwrap().push((ctx.id(), step, ctx.attempt()));
    let fetched: u32 = ctx
        .step("fetch", async {
            ran("fetch");
            Ok::<_, JobError>(base + 1)
        })
        .await?;
    let charged: u32 = ctx
        .step("charge", async {
            ran("charge");
            if ctx.attempt() == 1 {
                return Err(JobError::new("the gateway timed out"));
            }
            Ok(fetched * 10)
        })
        .await?;
    ctx.step("notify", async {
        ran("notify");
        Ok::<_, JobError>(charged + 1)
    })
    .await
}

each_backend! {
    async fn a_retry_skips_the_steps_that_succeeded_and_gets_their_outputs(db) {
        let client = Client::new(db.pool.clone());
        let runs = StepRuns::default();
        let id = Stepped::new(4).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[Stepped::TASK_TYPE]).data(runs.clone()));
        let record = client.wait(id, T).await.unwrap();
        w.stop().await;
        assert_eq!(record.status(), JobStatus::Processed);
        assert_eq!(record.output::<u32>().unwrap(), Some(51));
        let ran: Vec<(&str, i32)> = runs.lock().unwrap().iter().map(|r| (r.1, r.2)).collect();
        assert_eq!(ran, [("fetch", 1), ("charge", 1), ("charge", 2), ("notify", 2)]);
        let steps = serde_json::Value::Object(record.steps().unwrap());
        assert_eq!(steps, serde_json::json!({ "fetch": 5, "charge": 50, "notify": 51 }));
        let shown = sk_job(&db.url, id).await;
        assert!(shown.contains("charge, fetch, notify"), "{shown}");
        db.drop().await;
    }
}

/// The testing kit runs steps too: a run given an earlier run's steps resumes after
/// them; a recorded output of the wrong type and a bad name are fatal.
#[tokio::test]
async fn the_test_runner_resumes_from_recorded_steps() {
    let runs = StepRuns::default();
    let runner = sk_runtime::testing::Runner::new()
        .data(runs.clone())
        .attempt(2)
        .metadata(serde_json::json!({ "steps": { "fetch": 5 } }));
    let outcome = runner.perform(Stepped::new(4)).await;
    assert!(
        matches!(&outcome, sk_runtime::testing::Outcome::Succeeded { output: Some(o) } if *o == 51),
        "{outcome:?}"
    );
    let ran: Vec<&str> = runs.lock().unwrap().iter().map(|r| r.1).collect();
    assert_eq!(ran, ["charge", "notify"]);

    let changed = sk_runtime::testing::Runner::new()
        .data(runs.clone())
        .metadata(serde_json::json!({ "steps": { "fetch": "five" } }));
    match changed.perform(Stepped::new(4)).await {
        sk_runtime::testing::Outcome::Failed { error } => {
            assert_eq!(error.kind(), "step");
            assert!(error.message().contains("\"fetch\""), "{}", error.message());
        }
        other => panic!("a recorded output of another type is fatal: {other:?}"),
    }
    let ctx = sk_runtime::testing::Runner::new().context::<Stepped>();
    let unnamed = ctx.step("", async { Ok::<_, JobError>(1) }).await;
    assert!(unnamed.is_err_and(|e| e.is_fatal() && e.kind() == "step"));
}

/// What the sealed jobs received.
type Opened = Arc<Mutex<Vec<String>>>;

#[job(queue = "sealed", encrypted, max_attempts = 1)]
async fn sealed_job(email: String, opened: Data<Opened>) -> Result<(), JobError> {
    opened.lock().unwrap().push(email);
    Ok(())
}

/// The process's keys in every test that seals: the newest, "k2", seals.
fn process_keys() {
    let keys = sk_runtime::PayloadKeys::new("k2", [2; 32]).unwrap();
    sk_runtime::set_payload_keys(keys.with_older("k1", [1; 32]).unwrap());
}

each_backend! {
    async fn sealed_arguments_are_stored_unreadable_and_opened_only_by_a_key_holder(db) {
        process_keys();
        let client = Client::new(db.pool.clone());
        let post = |email: &str, queue: &str| {
            SealedJob::new(email.into()).with_queue(queue).enqueue(&db.pool)
        };
        let rotated = post("ada@example.com", "sealed-rotated").await.unwrap();
        let wrong = post("bob@example.com", "sealed-wrong").await.unwrap();
        let missing = post("cy@example.com", "sealed-missing").await.unwrap();
        // By name too, and a payload changed while it waits stays sealed.
        let by_name = client
            .enqueue_json(SealedJob::TASK_TYPE, serde_json::json!({ "email": "dee@example.com" }))
            .await
            .unwrap();
        let update = sk_runtime::JobUpdate::new().payload(serde_json::json!({ "email": "eve@example.com" }));
        client.update(by_name, &update).await.unwrap();
        for id in [rotated, wrong, missing, by_name] {
            let record = client.job(id).await.unwrap().unwrap();
            assert_eq!(record.sealed_with().as_deref(), Some("k2"));
            assert!(!record.payload.unwrap().contains("@example.com"), "stored unreadable");
        }
        let shown = sk_job(&db.url, rotated).await;
        assert!(shown.contains("sealed with payload key \"k2\"") && !shown.contains("ada@"), "{shown}");
        // The testing kit opens them with the process's keys.
        let waiting = sk_runtime::testing::enqueued::<SealedJob>(db.pool.clone()).await.unwrap();
        let mut emails: Vec<String> = waiting.into_iter().map(|j| j.email).collect();
        emails.sort();
        assert_eq!(emails, ["ada@example.com", "bob@example.com", "cy@example.com", "eve@example.com"]);
        let run = |queues: &[&str], keys: sk_runtime::PayloadKeys, opened: &Opened| {
            let builder = worker(&db, &[SealedJob::TASK_TYPE]).queues(queues.iter().copied());
            RunningWorker::start(builder.payload_keys(keys).data(opened.clone()))
        };
        // A worker a rotation later: "k3" seals now, "k2" still opens.
        let opened = Opened::default();
        let newer = sk_runtime::PayloadKeys::new("k3", [3; 32]).unwrap().with_older("k2", [2; 32]).unwrap();
        let w = run(&["sealed-rotated", "sealed"], newer, &opened);
        assert_eq!(client.wait(rotated, T).await.unwrap().status(), JobStatus::Processed);
        client.wait(by_name, T).await.unwrap();
        w.stop().await;
        let mut seen = opened.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, ["ada@example.com", "eve@example.com"]);
        // Another key of the same id, and no key of that id: fatal, naming the key.
        let other = sk_runtime::PayloadKeys::new("k2", [7; 32]).unwrap();
        let w = run(&["sealed-wrong"], other, &opened);
        let record = client.wait(wrong, T).await.unwrap();
        w.stop().await;
        assert_eq!(record.status(), JobStatus::Fatal);
        let error = record.last_error_message.unwrap_or_default();
        assert!(error.contains("\"k2\"") && error.contains("altered"), "{error}");
        let unrelated = sk_runtime::PayloadKeys::new("k9", [9; 32]).unwrap();
        let w = run(&["sealed-missing"], unrelated, &opened);
        let record = client.wait(missing, T).await.unwrap();
        w.stop().await;
        let error = record.last_error_message.unwrap_or_default();
        assert!(error.contains("\"k2\"") && error.contains("\"k9\""), "{error}");
        assert_eq!(opened.lock().unwrap().len(), 2, "no handler ran without its arguments");
        db.drop().await;
    }
}
