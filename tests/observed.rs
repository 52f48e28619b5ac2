//! What a job and a worker leave to read: log lines with the job's span, panics outside a handler, errors and outputs cut to what the tables hold.
//! A module of the `queue` test binary.

use super::*;

#[job]
async fn logs_inside(word: String) -> Result<(), JobError> {
    tracing::info!(word = %word, "inside the handler");
    Ok(())
}

/// Everything a subscriber writes, to read back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends this thread's INFO lines (and, on a one-thread runtime, every task's) to
/// `writer`, until the guard drops.
fn log_to<W>(writer: W) -> tracing::subscriber::DefaultGuard
where
    W: std::io::Write + Clone + Send + Sync + 'static,
{
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// A handler's own log line carries its job's id, type, queue and attempt (the job's
/// span). The test's runtime runs every task on this thread, where the subscriber is set.
#[tokio::test]
async fn a_jobs_own_log_lines_carry_its_id() {
    let db = TestDb::new().await;
    let captured = Captured::default();
    let writer = captured.clone();
    let _guard = log_to(writer);
    let id = LogsInside::new("marmalade".into())
        .with_queue("logs")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[LogsInside::TASK_TYPE]).queues(["logs"]));
    db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let text = captured.text();
    let line = text
        .lines()
        .find(|l| l.contains("inside the handler"))
        .unwrap_or_else(|| panic!("the handler's line is missing:\n{text}"));
    for field in [
        format!("id={id}"),
        "task_type=logs_inside".to_owned(),
        "queue=logs".to_owned(),
        "attempt=1".to_owned(),
        "word=marmalade".to_owned(),
    ] {
        assert!(line.contains(&field), "{field} is missing from: {line}");
    }
    db.drop().await;
}

#[job(max_attempts = 3)]
async fn fails_first_with(marker: String, ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() == 1 {
        return Err(JobError::new(marker));
    }
    Ok(())
}

/// A log writer that panics, once, on the first line that holds its marker: the panic
/// then happens in whichever of the worker's tasks logs that line.
#[derive(Clone)]
struct BreaksOnce {
    marker: &'static str,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl std::io::Write for BreaksOnce {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if String::from_utf8_lossy(bytes).contains(self.marker)
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("the log writer broke on {}", self.marker);
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A panic in the worker's completer (here in the log writer, while it logs a failure)
/// stops the worker with an error naming it, instead of leaving the worker up with its
/// jobs leased for ever; the lease runs out and another worker runs the job.
#[tokio::test]
async fn a_worker_whose_completer_panics_stops_and_its_jobs_run_elsewhere() {
    let db = TestDb::new().await;
    let writer = BreaksOnce {
        marker: "the-completer-breaks-here",
        armed: Arc::new(true.into()),
    };
    // The test's runtime runs every task on this thread, where the subscriber is set.
    let _guard = log_to(writer);
    let id = FailsFirstWith::new("the-completer-breaks-here".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let lease = Duration::from_secs(1);
    let first = worker(&db, &[FailsFirstWith::TASK_TYPE])
        .lease(lease)
        .build()
        .unwrap();
    let ended = tokio::time::timeout(T, first.run_until(std::future::pending()))
        .await
        .expect("the worker stops once its completer is gone");
    let error = ended.expect_err("a worker without its completer ends with an error");
    assert!(
        matches!(&error, sk_runtime::Error::WorkerTask { task: "completer", cause } if cause.contains("the log writer broke")),
        "{error}"
    );
    assert!(
        error.to_string().starts_with("the worker's completer stopped unexpectedly (the log writer broke on the-completer-breaks-here)"),
        "{error}"
    );
    // The first attempt's outcome was never written; its lease runs out, no heartbeat
    // extends it, and a second worker runs the job again.
    let second = RunningWorker::start(worker(&db, &[FailsFirstWith::TASK_TYPE]).lease(lease));
    let record = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    second.stop().await;
    assert_eq!(
        failed_attempts(&record),
        [(1, AttemptOutcome::Lost)],
        "{record:?}"
    );
    db.drop().await;
}

/// A metrics recorder whose first wait-time histogram panics, and which records
/// nothing.
struct BreaksOnWait(std::sync::atomic::AtomicBool);

impl metrics::Recorder for BreaksOnWait {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        if key.name() == "sk_job_queue_wait_seconds"
            && self.0.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("the recorder broke");
        }
        metrics::Histogram::noop()
    }
}

/// A panic in a job's task outside its handler (here in the metrics recorder, as the
/// job starts) does not leave the job leased for ever by a worker that still runs: its
/// lease runs out and the job runs again, and the worker goes on. (Backend-independent:
/// the executor's.)
#[tokio::test]
async fn a_panic_around_a_handler_loses_the_attempt_not_the_job() {
    let db = TestDb::new().await;
    let recorder = BreaksOnWait(true.into());
    // The test's runtime runs every task on this thread, where the recorder is set.
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let (probe, mut events) = probe();
    let id = Record::new("once".into()).enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .lease(Duration::from_secs(1))
            .data(probe.clone()),
    );
    let record = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let later = Record::new("later".into()).enqueue(&db.pool).await.unwrap();
    db.wait_job(later, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    assert_eq!(
        failed_attempts(&record),
        [(1, AttemptOutcome::Lost)],
        "{record:?}"
    );
    let mut runs = Vec::new();
    while let Ok(event) = events.try_recv() {
        runs.push((event.label, event.attempt));
    }
    assert_eq!(
        runs,
        [("once".to_owned(), 2), ("later".to_owned(), 1)],
        "the first run never reached its handler"
    );
    db.drop().await;
}

#[job(max_attempts = 1)]
async fn fails_at_length(bytes: usize) -> Result<(), JobError> {
    // Two-byte characters, so the cut has to find a character boundary.
    Err(JobError::new("é".repeat(bytes / 2))
        .with_kind("k".repeat(300))
        .with_detail("d".repeat(100_000)))
}

/// `stored` is the start of `whole`, at most `limit` bytes with its marker, and the
/// marker counts the bytes left out.
fn assert_cut(stored: &str, whole: &str, limit: usize) {
    assert!(stored.len() <= limit, "{} > {limit}", stored.len());
    let (kept, more) = stored.split_once("… [").expect("a marker");
    assert!(
        kept.len() + 32 > limit,
        "kept only {} of {limit}",
        kept.len()
    );
    assert!(whole.starts_with(kept));
    let more = more.strip_suffix(" bytes more]").expect("the marker's end");
    assert_eq!(more.parse::<usize>().unwrap(), whole.len() - kept.len());
}

each_backend! {
    /// A long error is stored cut, with a marker saying how much was left out, and the
    /// job still reaches its final state.
    async fn a_long_error_is_stored_cut_and_marked(db) {
        let id = FailsAtLength::new(70_000).enqueue(&db.pool).await.unwrap();
        let short = FailsAtLength::new(100).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[FailsAtLength::TASK_TYPE]));
        let record = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        let whole = db.wait_job(short, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        let message = record.last_error_message.clone().unwrap();
        assert_cut(&message, &"é".repeat(35_000), 8 * 1024);
        assert_cut(&record.last_error_detail.unwrap(), &"d".repeat(100_000), 32 * 1024);
        assert_cut(&record.last_error_type.unwrap(), &"k".repeat(300), 255);
        let attempt = &db.info().job(id).await.unwrap().unwrap().failed_attempts[0];
        assert_eq!(attempt.message.as_deref(), Some(message.as_str()));
        assert_eq!(whole.last_error_message, Some("é".repeat(50)));
        db.drop().await;
    }
}

#[job(max_attempts = 1)]
async fn fails_with_context() -> anyhow::Result<()> {
    let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "config.toml is missing");
    Err(anyhow::Error::new(cause).context("cannot load the settings"))
}

/// A handler returning `anyhow::Result` records the error's message, type and causes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anyhow_error_is_recorded_with_its_causes() {
    let db = TestDb::new().await;
    let id = FailsWithContext::new().enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(worker(&db, &[FailsWithContext::TASK_TYPE]));
    let record = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
    w.stop().await;
    assert_eq!(
        record.last_error_message.as_deref(),
        Some("cannot load the settings")
    );
    assert_eq!(record.last_error_type.as_deref(), Some("anyhow::Error"));
    let detail = record.last_error_detail.unwrap_or_default();
    assert!(detail.contains("config.toml is missing"), "{detail}");
    db.drop().await;
}

#[job(max_attempts = 1)]
async fn fails_with_nul() -> Result<(), JobError> {
    Err(JobError::new("bad\0byte")
        .with_kind("k\0")
        .with_detail("d\0d"))
}

#[job]
async fn outputs(word: String) -> Result<String, JobError> {
    Ok(word)
}

each_backend! {
    /// A NUL in a job's error is stored as U+FFFD on every backend (PostgreSQL's text
    /// cannot hold one: it refused the whole batch, retried for ever, and the worker's
    /// other jobs waited with it); a NUL in its output is JSON's `\u0000`, kept as it is.
    async fn a_nul_in_an_error_or_an_output_is_stored(db) {
        let failed = FailsWithNul::new().enqueue(&db.pool).await.unwrap();
        let output = Outputs::new("out\0put".into()).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[FailsWithNul::TASK_TYPE, Outputs::TASK_TYPE]));
        let failed = db.wait_job(failed, T, |r| r.status() == JobStatus::Fatal).await;
        let output = db.wait_job(output, T, |r| r.status() == JobStatus::Processed).await;
        w.stop().await;
        assert_eq!(failed.last_error_message.as_deref(), Some("bad\u{FFFD}byte"));
        assert_eq!(failed.last_error_type.as_deref(), Some("k\u{FFFD}"));
        assert_eq!(failed.last_error_detail.as_deref(), Some("d\u{FFFD}d"));
        assert_eq!(failed_attempts(&failed), [(1, AttemptOutcome::Fatal)]);
        assert_eq!(output.output_json.as_deref(), Some(r#""out\u0000put""#));
        db.drop().await;
    }
}

#[job(max_attempts = 1)]
async fn fails_saying(word: String) -> Result<(), JobError> {
    Err(JobError::new(word))
}

#[job]
async fn never_recorded() {}

/// A trigger on the results table that refuses rows as a database refuses a value it
/// cannot store: an output or an error holding `xyzzy`, and any success of
/// `never_recorded`.
fn refusing_trigger(backend: &str) -> Vec<String> {
    const WHEN: &str = "NEW.task_output LIKE '%xyzzy%' OR NEW.task_errors LIKE '%xyzzy%'
        OR (NEW.task_type = 'never_recorded' AND NEW.task_status = 3)";
    match backend {
        "PostgreSQL" => vec![
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                IF NEW.task_output LIKE '%xyzzy%' OR NEW.task_errors::text LIKE '%xyzzy%'
                    OR (NEW.task_type = 'never_recorded' AND NEW.task_status = 3) THEN
                    RAISE EXCEPTION 'this row is refused' USING ERRCODE = '22023';
                END IF;
                RETURN NEW;
            END $$"
                .into(),
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON sk_task_results_t
                FOR EACH ROW EXECUTE FUNCTION refuse()"
                .into(),
        ],
        "MySQL" => ["INSERT", "UPDATE"]
            .map(|event| {
                format!(
                    "CREATE TRIGGER refuse_{event} BEFORE {event} ON sk_task_results_t FOR EACH ROW
                    BEGIN IF {WHEN} THEN SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'this row is refused'; END IF; END"
                )
            })
            .to_vec(),
        _ => ["INSERT", "UPDATE"]
            .map(|event| {
                format!(
                    "CREATE TRIGGER refuse_{event} BEFORE {event} ON sk_task_results_t WHEN {WHEN}
                    BEGIN SELECT RAISE(ABORT, 'this row is refused'); END"
                )
            })
            .to_vec(),
    }
}

/// The database refuses the rows of some outcomes in a batch for what they hold (here a
/// trigger; in life a value its column cannot take). The batch is halved until each
/// refused outcome is alone: the others are recorded as they are, a refused success
/// without its output, a refused failure with a message saying its error was refused,
/// and one refused even so is not recorded (its lease runs out). The worker goes on.
/// Before, the batch was retried for ever and the worker held all its jobs. On a
/// runtime of one thread, so the outcomes of a claim reach the completer together.
async fn refused_outcomes<B: TestBackend>(db: Db<B>)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    for sql in refusing_trigger(B::BACKEND) {
        db.execute(&sql).await;
    }
    let captured = Captured::default();
    let _guard = log_to(captured.clone());
    let mut fine = Vec::new();
    for n in 0..5 {
        fine.push(
            Outputs::new(format!("fine {n}"))
                .enqueue(&db.pool)
                .await
                .unwrap(),
        );
    }
    let refused_output = Outputs::new("xyzzy".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let mut failed = Vec::new();
    for n in 0..5 {
        failed.push(
            FailsSaying::new(format!("plain {n}"))
                .enqueue(&db.pool)
                .await
                .unwrap(),
        );
    }
    let refused_error = FailsSaying::new("xyzzy".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let never = NeverRecorded::new().enqueue(&db.pool).await.unwrap();
    let types = [
        Outputs::TASK_TYPE,
        FailsSaying::TASK_TYPE,
        NeverRecorded::TASK_TYPE,
    ];
    let w = RunningWorker::start(
        worker(&db, &types)
            .concurrency(20)
            .lease(Duration::from_secs(3600)),
    );
    for (n, id) in fine.iter().enumerate() {
        let r = db
            .wait_job(*id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.output_json, Some(format!("\"fine {n}\"")));
    }
    let r = db
        .wait_job(refused_output, T, |r| r.status() == JobStatus::Processed)
        .await;
    assert_eq!(r.output_json, None, "recorded without its output");
    for (n, id) in failed.iter().enumerate() {
        let r = db
            .wait_job(*id, T, |r| r.status() == JobStatus::Fatal)
            .await;
        assert_eq!(r.last_error_message, Some(format!("plain {n}")));
    }
    let r = db
        .wait_job(refused_error, T, |r| r.status() == JobStatus::Fatal)
        .await;
    let message = r.last_error_message.unwrap_or_default();
    assert!(
        message.starts_with("the database refused to store this run's error")
            && message.contains("this row is refused"),
        "{message}"
    );
    assert_eq!(r.last_error_type.as_deref(), Some("sk::unstorable"));
    // The worker goes on.
    let later = Outputs::new("later".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    db.wait_job(later, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let r = db.job(never).await;
    assert_ne!(r.status(), JobStatus::Processed, "{r:?}");
    let log = captured.text();
    assert!(log.contains("writing them in halves"), "{log}");
    assert!(
        log.contains("even without its output; not recorded"),
        "{log}"
    );
    db.drop().await;
}

each_backend! {
    current_thread;
    async fn outcomes_the_database_refuses_are_recorded_without_what_it_refuses(db) {
        refused_outcomes(db).await;
    }
}

#[job]
async fn repeats(bytes: usize) -> Result<String, JobError> {
    Ok("x".repeat(bytes))
}

#[job(max_attempts = 1)]
async fn fails_carrying(blob: String) -> Result<(), JobError> {
    Err(JobError::new(format!("failed with {} bytes", blob.len())))
}

each_backend! {
    /// Large outputs and large payloads of jobs that fail for good (kept to inspect or
    /// re-post), all in one batch: each store call and statement stays within what the
    /// database takes (MariaDB closed the connection on a statement over its 16 MiB
    /// `max_allowed_packet`, and the batch was retried for ever), and an output over
    /// 1 MiB is recorded without it.
    async fn a_batch_of_large_outcomes_is_recorded(db) {
        let mut outputs = Vec::new();
        let mut failed = Vec::new();
        for _ in 0..30 {
            outputs.push(Repeats::new(1_000_000).enqueue(&db.pool).await.unwrap());
            failed.push(FailsCarrying::new("y".repeat(1_000_000)).enqueue(&db.pool).await.unwrap());
        }
        let too_large = Repeats::new(1_100_000).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Repeats::TASK_TYPE, FailsCarrying::TASK_TYPE]).concurrency(100),
        );
        for id in outputs {
            let r = db.wait_job(id, T, |r| r.status() == JobStatus::Processed).await;
            assert_eq!(r.output_json.map(|o| o.len()), Some(1_000_002));
        }
        for id in failed {
            let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
            assert_eq!(r.last_error_message.as_deref(), Some("failed with 1000000 bytes"));
            assert!(r.payload.is_some_and(|p| p.len() > 1_000_000));
        }
        let r = db.wait_job(too_large, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(r.output_json, None);
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    /// Under a retention of zero a success without output leaves no trace but its count:
    /// its queue row goes and no results row is written. A success with output, a job
    /// with a unique key and a failure are recorded as before. (The worker's clock stands
    /// still, so the upkeep's retention of zero prunes nothing the test reads.)
    async fn a_retention_of_zero_records_no_plain_success(db) {
        let client = sk_runtime::Client::new(db.pool.clone());
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let plain = Record::new("plain".into()).enqueue(&db.pool).await.unwrap();
        let keyed = Record::new("keyed".into())
            .with_unique_key("keyed")
            .enqueue(&db.pool)
            .await
            .unwrap();
        let output = Outputs::new("kept".into()).enqueue(&db.pool).await.unwrap();
        let failed = FailsSaying::new("no".into()).enqueue(&db.pool).await.unwrap();
        let (probe, mut rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE, Outputs::TASK_TYPE, FailsSaying::TASK_TYPE])
                .clock(clock.clone())
                .result_retention(Duration::ZERO)
                .data(probe),
        );
        let output = db.wait_job(output, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(output.output_json.as_deref(), Some(r#""kept""#));
        db.wait_job(keyed, T, |r| r.status() == JobStatus::Processed).await;
        db.wait_job(failed, T, |r| r.status() == JobStatus::Fatal).await;
        let mut ran = [recv(&mut rx, "a record job", T).await.id, recv(&mut rx, "the other", T).await.id];
        ran.sort();
        let mut both = [plain, keyed];
        both.sort();
        assert_eq!(ran, both);
        wait_until("the plain success to leave the queue", T, || async {
            client.job(plain).await.ok()?.is_none().then_some(())
        })
        .await;
        w.stop().await;
        assert!(client.job(plain).await.unwrap().is_none(), "no record of it");
        assert!(matches!(client.wait(plain, T).await, Err(Error::JobNotFound(id)) if id == plain));
        let counted: i64 = client
            .throughput(clock.now() - chrono::Duration::hours(1), sk_runtime::Per::Minute, Some(Record::TASK_TYPE))
            .await
            .unwrap()
            .iter()
            .map(|t| t.processed)
            .sum();
        assert_eq!(counted, 2, "both runs counted");
        let counts = db.info().counts().await.unwrap();
        assert_eq!(counts.status(JobStatus::Processed), 2, "the keyed and the output");
        db.drop().await;
    }
}
