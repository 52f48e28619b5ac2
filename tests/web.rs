//! The dashboard (`sk web`): its end-to-end test in Debian's Chromium, and its guards
//! (the token, the read-only mode) over plain HTTP; and the worker's metrics as its
//! Prometheus exporter serves them. A module of the `queue` test binary.
//!
//! The browser test needs /usr/bin/chromium and tests/browser/node_modules; where they
//! are missing, tests/browser/setup.sh installs them (as `.ci/run` does first), and the
//! test fails, saying why, if that cannot be done.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chrono::Utc;
use sk_cli::web::{self, WebOptions};
use sk_runtime::{job, CancelOutcome, Client, Data, Job, JobContext, JobError, JobStatus, Per};
use sk_tests::{each_backend, recv, wait_until, RunningWorker, TestDb};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{probe, worker, AlwaysFails, Probe, Record, T};

/// Whether the cause of `deploy`'s failure is fixed.
#[derive(Clone, Default)]
struct Fixed(Arc<AtomicBool>);

#[job(max_attempts = 1)]
async fn deploy(fixed: Data<Fixed>) -> Result<(), JobError> {
    if fixed.0.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(JobError::new("the mirror is down"))
    }
}

/// Serves the dashboard on a free loopback port; its base URL.
pub(crate) async fn serve(client: Client, options: WebOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(web::serve(client, listener, options));
    format!("http://{address}")
}

/// The dashboard served twice over `client`: as it is, and `--read-only`; their URLs.
async fn serve_both(client: &Client) -> (String, String) {
    let url = serve(client.clone(), WebOptions::default()).await;
    let read_only = WebOptions {
        read_only: true,
        ..WebOptions::default()
    };
    (url, serve(client.clone(), read_only).await)
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Chromium and playwright-core, installed by setup.sh where missing. Once per test
/// binary: the browser tests run at once, and two installs at once (apt's lock, npm's
/// folder) made one of them fail on a fresh machine.
fn browser_ready() {
    static READY: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut ready = READY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *ready {
        return;
    }
    let dir = browser_dir();
    if !Path::new("/usr/bin/chromium").exists()
        || !dir.join("node_modules/playwright-core").exists()
    {
        let status = std::process::Command::new("bash")
            .arg(dir.join("setup.sh"))
            .status()
            .expect("bash runs tests/browser/setup.sh");
        assert!(
            status.success(),
            "tests/browser/setup.sh could not install Chromium and playwright-core; the browser test needs them"
        );
    }
    *ready = true;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_browser_shows_and_acts() {
    browser_ready();
    let db = TestDb::new().await;
    let client = Client::new(db.pool.clone());
    let fixed = Fixed::default();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(&db, &[Deploy::TASK_TYPE, Record::TASK_TYPE])
            .data(fixed.clone())
            // The default heartbeat (10 s): the pages list the worker as alive for
            // three of them, which a 200 ms heartbeat missed under a loaded CI.
            .data(probe),
    );

    // Seeds: a fatal job, four that succeeded, two scheduled and one cancelled in "mail".
    let fatal = Deploy::new().enqueue(&db.pool).await.unwrap();
    client.wait(fatal, T).await.unwrap();
    for i in 0..4 {
        let id = Record::new(format!("done {i}"))
            .enqueue(&db.pool)
            .await
            .unwrap();
        client.wait(id, T).await.unwrap();
    }
    let later = Utc::now() + chrono::Duration::hours(1);
    for label in ["later 1", "later 2", "cancelled"] {
        let id = Record::new(label.into())
            .with_queue("mail")
            .run_at(later)
            .enqueue(&db.pool)
            .await
            .unwrap();
        if label == "cancelled" {
            client.cancel(id).await.unwrap();
        }
    }
    while rx.try_recv().is_ok() {}
    // The worker writes its run counts with its heartbeat.
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    wait_until("the run counts written", T, || async {
        let rows = client.throughput(hour_ago, Per::Minute, None).await.ok()?;
        let ok: i64 = rows.iter().map(|r| r.processed).sum();
        let failed: i64 = rows.iter().map(|r| r.failed).sum();
        (ok == 4 && failed == 1).then_some(())
    })
    .await;
    fixed.0.store(true, Ordering::SeqCst);

    let (url, read_only) = serve_both(&client).await;
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/dashboard");
    std::fs::create_dir_all(&shots).unwrap();
    run_browser(
        "dashboard.mjs",
        &[
            ("SK_URL", url.as_str()),
            ("SK_RO_URL", &read_only),
            ("SK_FATAL", &fatal.to_string()),
            ("SK_SHOTS", &shots.to_string_lossy()),
        ],
    )
    .await;

    // What the page did, as the database has it.
    assert_eq!(db.job(fatal).await.status(), JobStatus::Processed);
    let mail = client.queues().await.unwrap();
    let mail = mail.iter().find(|q| q.name == "mail").unwrap();
    assert!(mail.paused_at.is_some(), "paused from the page");
    // Nothing of the paused queue runs, though older than a job that does.
    let held = Record::new("held".into())
        .with_queue("mail")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let after = Record::new("after".into()).enqueue(&db.pool).await.unwrap();
    let ran = recv(&mut rx, "the later job of another queue", T).await;
    assert_eq!(ran.id, after);
    assert_eq!(db.job(held).await.status(), JobStatus::Unprocessed);
    assert!(rx.try_recv().is_err(), "nothing of the paused queue ran");
    // A fair queue says so in its "per tenant" cell, which links to its tenants.
    client.set_fair("mail", true).await.unwrap();
    let (status, page) = request(&url, "GET", "/queues", "").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(r#"<a href="/queues/mail/tenants">fair</a>"#),
        "{page}"
    );
    w.stop().await;
    db.drop().await;
}

/// Whether the payment gateway is down.
#[derive(Clone, Default)]
struct Gateway(Arc<AtomicBool>);

#[job(queue = "payments", max_attempts = 1)]
async fn charge_card(invoice: u64, gateway: Data<Gateway>) -> Result<(), JobError> {
    if gateway.0.load(Ordering::SeqCst) {
        return Err(JobError::new(format!(
            "gateway timeout charging invoice INV-{invoice}"
        )));
    }
    Ok(())
}

/// Picks an order's items (a workflow's fan-out).
#[job(queue = "fulfilment")]
async fn pick_items(order: u64) -> Result<u64, JobError> {
    Ok(order * 2)
}

/// Packs what was picked; the packing station is offline while the gateway is down.
#[job(queue = "fulfilment", max_attempts = 1)]
async fn pack_items(
    items: sk_runtime::Inputs<u64>,
    gateway: Data<Gateway>,
) -> Result<u64, JobError> {
    if gateway.0.load(Ordering::SeqCst) {
        return Err(JobError::fatal("packing station offline"));
    }
    Ok(items.iter().sum())
}

each_backend! {
    /// The incident the dashboard is for, worked in Chromium alone: 500 `charge_card`
    /// jobs of queue `payments` fail for good in a gateway outage. The operator finds the
    /// task type on the overview, opens its one error group, pauses the queue, retries
    /// all 500 from the group with one confirmation, resumes, and sees them succeed; the
    /// audit page lists the pause, the retry of 500 and the resume.
    async fn an_incident_is_worked_in_the_dashboard_alone(db) {
        browser_ready();
        let client = Client::new(db.pool.clone());
        let gateway = Gateway::default();
        gateway.0.store(true, Ordering::SeqCst);
        let (probe, _ran) = probe();
        let w = RunningWorker::start(
            worker(&db, &[ChargeCard::TASK_TYPE, Record::TASK_TYPE, PickItems::TASK_TYPE, PackItems::TASK_TYPE])
                .data(gateway.clone())
                .data(probe)
                // The default heartbeat: the overview lists queue `default`, which only
                // the live worker's default queues name, for three of them.
                .concurrency(16),
        );
        let done = Record::new("a job that succeeded".into()).enqueue(&db.pool).await.unwrap();
        client.wait(done, T).await.unwrap();
        ChargeCard::enqueue_many(&db.pool, (10_000..10_500).map(ChargeCard::new))
            .await
            .unwrap();
        // A workflow the outage broke, for its page.
        let flow = sk_runtime::Workflow::fan_out((1..=3).map(PickItems::new))
            .then(PackItems::new())
            .enqueue(&db.pool)
            .await
            .unwrap();
        let hour_ago = Utc::now() - chrono::Duration::hours(1);
        wait_until("501 jobs failed for good, and counted", T * 4, || async {
            let fatal: Vec<(Option<String>, i64)> = client
                .count_by(sk_runtime::CountBy::Queue)
                .await
                .ok()?
                .into_iter()
                .filter(|c| c.fatal > 0)
                .map(|c| (c.key, c.fatal))
                .collect();
            let rows = client.throughput(hour_ago, Per::Minute, None).await.ok()?;
            let failed: i64 = rows.iter().map(|r| r.failed).sum();
            let expected = [(Some("fulfilment".to_owned()), 1), (Some("payments".to_owned()), 500)];
            (fatal == expected && failed == 501).then_some(())
        })
        .await;
        // The outage ends; the dashboard does the rest.
        gateway.0.store(false, Ordering::SeqCst);
        let (url, read_only) = serve_both(&client).await;
        let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/incident");
        std::fs::create_dir_all(&shots).unwrap();
        run_browser(
            "incident.mjs",
            &[
                ("SK_URL", url.as_str()),
                ("SK_RO_URL", &read_only),
                ("SK_SHOTS", &shots.to_string_lossy()),
                ("SK_WORKFLOW", &flow.workflow.to_string()),
            ],
        )
        .await;
        w.stop().await;

        // What the pages did, as the database has it.
        let processed = sk_runtime::JobFilter::new()
            .queue("payments")
            .status(JobStatus::Processed);
        assert_eq!(client.count_where(&processed, 1_000).await.unwrap(), 498, "2 deleted by hand");
        let packed = client.wait(flow.last()[0], T).await.unwrap();
        assert_eq!(packed.output::<u64>().unwrap(), Some(12), "retried from its page");
        let audit = client.audit(None, 10).await.unwrap();
        let actions: Vec<(&str, Option<&str>, Option<i64>)> = audit
            .iter()
            .map(|e| (e.action.as_str(), e.target.as_deref(), e.jobs))
            .collect();
        let workflow = flow.workflow.to_string();
        // The two rows deleted by hand, newest first, as the audit lists them.
        let deleted: Vec<String> = audit
            .iter()
            .take(2)
            .filter_map(|e| e.target.clone())
            .collect();
        assert_eq!(deleted.len(), 2, "{audit:?}");
        for id in &deleted {
            assert!(client.job(id.parse().unwrap()).await.unwrap().is_none(), "{id} is gone");
        }
        assert_eq!(
            actions,
            [
                ("delete", Some(deleted[0].as_str()), Some(1)),
                ("delete", Some(deleted[1].as_str()), Some(1)),
                ("retry-workflow", Some(workflow.as_str()), Some(1)),
                ("resume", Some("payments"), None),
                ("retry", None, Some(500)),
                ("pause", Some("payments"), None)
            ]
        );
        assert!(audit.iter().all(|e| e.actor.starts_with("web:")), "{audit:?}");
        db.drop().await;
    }
}

/// A job whose queue, tenant, metadata, payload and error message hold HTML, script and
/// ANSI escapes, shown on every page of the dashboard: in the browser, nothing of it runs
/// or becomes an element, and all of it is shown as text; SQL in filter values is data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_outside_text_as_text() {
    use super::cli::HOSTILE;
    browser_ready();
    let db = TestDb::new().await;
    let client = Client::new(db.pool.clone());
    let id = super::cli::hostile_job(&db).await;
    // The audit trail shows who acted as text too.
    let filter = sk_runtime::JobFilter::new().queue("nothing");
    client
        .clone()
        .actor(HOSTILE)
        .cancel_where(&filter)
        .await
        .unwrap();
    let url = serve(client, WebOptions::default()).await;
    run_browser(
        "hostile.mjs",
        &[
            ("SK_URL", url.as_str()),
            ("SK_JOB", &id.to_string()),
            ("SK_TEXT", HOSTILE),
        ],
    )
    .await;
    db.drop().await;
}

/// Runs `script` of tests/browser in Node.js with `env`; it must succeed.
async fn run_browser(script: &str, env: &[(&str, &str)]) {
    let node = tokio::process::Command::new("node")
        .arg(browser_dir().join(script))
        .envs(env.iter().copied())
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), node)
        .await
        .expect("the browser test ends within two minutes")
        .expect("node runs (the browser test needs Node.js)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the browser test {script} failed:\n{said}"
    );
    println!("{said}");
}

/// One HTTP/1.1 request to `url` (`http://host:port`): the status and the body.
pub(crate) async fn request(url: &str, method: &str, path: &str, headers: &str) -> (u16, String) {
    let host = url.trim_start_matches("http://");
    send(url, method, path, &format!("Host: {host}\r\n{headers}"), "").await
}

/// One HTTP/1.1 request to `url` with exactly these header lines (each ending in CRLF,
/// `Host` among them or not) and this form body: the status and the body.
pub(crate) async fn send(
    url: &str,
    method: &str,
    path: &str,
    headers: &str,
    form: &str,
) -> (u16, String) {
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\n{headers}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_asks_for_its_token_and_the_csrf_token() {
    let db = TestDb::new().await;
    let client = Client::new(db.pool.clone());
    let url = serve(
        client.clone(),
        WebOptions {
            token: Some("s3cret".into()),
            ..WebOptions::default()
        },
    )
    .await;
    let (status, _) = request(&url, "GET", "/", "").await;
    assert_eq!(status, 401, "no token");
    let (status, _) = request(&url, "GET", "/", "Authorization: Bearer wrong\r\n").await;
    assert_eq!(status, 401, "a wrong token");
    let (status, body) = request(&url, "GET", "/", "Authorization: Bearer s3cret\r\n").await;
    assert_eq!(status, 200, "{body}");
    // "ops:s3cret", as a browser's basic auth sends it.
    let basic = "Authorization: Basic b3BzOnMzY3JldA==\r\n";
    let (status, body) = request(&url, "GET", "/metrics", basic).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("# TYPE sk_queue_jobs gauge"), "{body}");

    // An action without the form's CSRF token changes nothing.
    let (status, _) = request(&url, "POST", "/queues/mail/pause", basic).await;
    assert_eq!(status, 403);
    let cross = format!("{basic}Sec-Fetch-Site: cross-site\r\n");
    let (status, _) = request(&url, "POST", "/queues/mail/pause", &cross).await;
    assert_eq!(status, 403);
    assert!(client.queues().await.unwrap().is_empty(), "nothing paused");

    // An unknown job is a 404 page, not an error of the server.
    let path = format!("/jobs/{}", uuid::Uuid::now_v7());
    let (status, body) = request(&url, "GET", &path, basic).await;
    assert_eq!(status, 404);
    assert!(body.contains("no job"), "{body}");
    db.drop().await;
}

/// Runs until cancelled.
#[job]
async fn until_cancelled(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "started");
    ctx.cancelled().await;
    Err(JobError::new("stopped because asked to"))
}

/// The value of the sample of `name` whose labels include each of `labels`.
fn sample(scrape: &str, name: &str, labels: &[&str]) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once("} ")?;
        let set: Vec<&str> = set.split(',').collect();
        labels
            .iter()
            .all(|l| set.contains(l))
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_exports_its_metrics_to_prometheus() {
    // The one test of this binary that installs a recorder; its jobs use a queue of their own.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    sk_runtime::telemetry::install_prometheus(address).expect("the exporter starts");
    let db = TestDb::new().await;
    let client = Client::new(db.pool.clone());
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(
            &db,
            &[
                Record::TASK_TYPE,
                AlwaysFails::TASK_TYPE,
                UntilCancelled::TASK_TYPE,
            ],
        )
        .data(probe)
        .heartbeat_interval(std::time::Duration::from_millis(100))
        .queue_depth_metrics(std::time::Duration::from_millis(100)),
    );
    let q = "metered";
    for label in ["a", "b"] {
        let id = Record::new(label.into())
            .with_queue(q)
            .enqueue(&db.pool)
            .await
            .unwrap();
        client.wait(id, T).await.unwrap();
    }
    let failing = AlwaysFails::new()
        .with_queue(q)
        .enqueue(&db.pool)
        .await
        .unwrap();
    client.wait(failing, T).await.unwrap();
    let running = UntilCancelled::new()
        .with_queue(q)
        .enqueue(&db.pool)
        .await
        .unwrap();
    loop {
        if recv(&mut rx, "the job to start", T).await.id == running {
            break;
        }
    }
    assert_eq!(
        client.cancel(running).await.unwrap(),
        CancelOutcome::CancelledWhileRunning
    );
    let later = Utc::now() + chrono::Duration::hours(1);
    Record::new("later".into())
        .with_queue(q)
        .run_at(later)
        .enqueue(&db.pool)
        .await
        .unwrap();

    let queue = "queue=\"metered\"";
    let expected: &[(&str, &str, f64)] = &[
        ("sk_jobs_enqueued_total", "task_type=\"record\"", 3.0),
        ("sk_jobs_completed_total", "task_type=\"record\"", 2.0),
        ("sk_jobs_retried_total", "task_type=\"always_fails\"", 2.0),
        ("sk_jobs_failed_total", "task_type=\"always_fails\"", 1.0),
        (
            "sk_jobs_cancelled_total",
            "task_type=\"until_cancelled\"",
            1.0,
        ),
        ("sk_job_run_seconds_count", "task_type=\"record\"", 2.0),
        (
            "sk_job_queue_wait_seconds_count",
            "task_type=\"record\"",
            2.0,
        ),
        ("sk_queue_jobs", "state=\"scheduled\"", 1.0),
        ("sk_queue_jobs", "state=\"fatal\"", 1.0),
        ("sk_queue_jobs", "state=\"cancelled\"", 1.0),
    ];
    let url = format!("http://{address}");
    let scrape = wait_until("the metrics scraped", T, || async {
        let (status, body) = request(&url, "GET", "/metrics", "").await;
        let all = expected
            .iter()
            .all(|(name, label, want)| sample(&body, name, &[queue, label]) == Some(*want));
        (status == 200 && all).then_some(body)
    })
    .await;
    assert!(
        scrape.contains("# TYPE sk_job_run_seconds histogram"),
        "{scrape}"
    );
    assert!(
        scrape.contains("# TYPE sk_job_queue_wait_seconds histogram"),
        "{scrape}"
    );

    // A queue with no job left reads zero, not its last count.
    let drained = Record::new("drained".into())
        .with_queue("drained")
        .run_at(later)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let gauge =
        |body: &str, state: &str| sample(body, "sk_queue_jobs", &["queue=\"drained\"", state]);
    wait_until("the drained queue's job counted", T, || async {
        let (_, body) = request(&url, "GET", "/metrics", "").await;
        (gauge(&body, "state=\"scheduled\"") == Some(1.0)).then_some(())
    })
    .await;
    client.cancel(drained).await.unwrap();
    client
        .prune(Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    wait_until("the drained queue at zero", T, || async {
        let (_, body) = request(&url, "GET", "/metrics", "").await;
        let zero = Some(0.0);
        (gauge(&body, "state=\"scheduled\"") == zero && gauge(&body, "state=\"cancelled\"") == zero)
            .then_some(())
    })
    .await;
    w.stop().await;
    db.drop().await;
}

#[job]
async fn traced() {
    tracing::info!("inside the traced job");
}

/// A job's span continues the OpenTelemetry trace that enqueued it (cargo feature
/// `opentelemetry`). The test's runtime runs every task on this thread, where the
/// subscriber is set.
#[tokio::test]
async fn a_job_continues_the_trace_that_enqueued_it() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("sk-test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let db = TestDb::new().await;
    let id = {
        let request = tracing::info_span!("http.request");
        let _entered = request.enter();
        Traced::new()
            .with_queue("traced")
            .enqueue(&db.pool)
            .await
            .unwrap()
    };
    let metadata = db.job(id).await.metadata.unwrap_or_default();
    assert!(metadata.contains("traceparent"), "{metadata}");
    let w = RunningWorker::start(worker(&db, &[Traced::TASK_TYPE]).queues(["traced"]));
    db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let request = spans
        .iter()
        .find(|s| s.name == "http.request")
        .expect("the request span");
    let job = spans
        .iter()
        .find(|s| s.name == "sk.job")
        .expect("the job's span");
    assert_eq!(job.span_context.trace_id(), request.span_context.trace_id());
    assert_eq!(job.parent_span_id, request.span_context.span_id());
    db.drop().await;
}

/// Each job's span is a child of the span the worker runs in, not of the job whose end
/// freed its slot (it was: at concurrency 1 each job's span nested in the one before,
/// and a log line named every job before it).
#[tokio::test]
async fn each_jobs_span_is_a_child_of_the_workers() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing::Instrument as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("sk-test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let db = TestDb::new().await;
    let ids = Traced::enqueue_many(&db.pool, (0..4).map(|_| Traced::new().with_queue("spans")))
        .await
        .unwrap();
    let w = worker(&db, &[Traced::TASK_TYPE])
        .queues(["spans"])
        .concurrency(1)
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(
        w.run_until(async move {
            let _ = stopped.await;
        })
        .instrument(tracing::info_span!("app.worker")),
    );
    for id in &ids {
        db.wait_job(*id, T, |r| r.status() == JobStatus::Processed)
            .await;
    }
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let worker_span = spans
        .iter()
        .find(|s| s.name == "app.worker")
        .expect("the worker's span");
    let jobs: Vec<_> = spans.iter().filter(|s| s.name == "sk.job").collect();
    assert_eq!(jobs.len(), ids.len(), "a span per job");
    for job in jobs {
        assert_eq!(
            job.parent_span_id,
            worker_span.span_context.span_id(),
            "a job's span is the worker's child"
        );
    }
    db.drop().await;
}

/// The CSRF token of the dashboard at `url`, from a form of its queues page (a queue with
/// a job has one).
async fn csrf(url: &str) -> String {
    let (status, page) = request(url, "GET", "/queues", "").await;
    assert_eq!(status, 200, "{page}");
    let at = page.find("name=\"csrf\" value=\"").expect("a form") + 19;
    page[at..at + 64].to_owned()
}

/// DNS rebinding: a page of another site whose name resolves to 127.0.0.1 sends its own
/// name as `Host`, and used to read a job's payload and the CSRF token and act with them.
/// Now a request naming a host that is not the dashboard's is refused (421) before
/// anything is read, and an action whose Origin (or Referer) is another site's is refused
/// (403) whatever token it carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_serves_its_own_host_and_origin_only() {
    let db = TestDb::new().await;
    let client = Client::new(db.pool.clone());
    let id = Record::new("secret payload".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let options = WebOptions {
        allow_hosts: vec!["jobs.internal".into()],
        ..WebOptions::default()
    };
    let url = serve(client.clone(), options).await;
    let port = url.rsplit(':').next().unwrap().to_owned();
    let job = format!("/jobs/{id}");
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        "localhost".to_owned(),
        String::new(),
    ] {
        let (status, body) = send(&url, "GET", &job, &format!("Host: {host}\r\n"), "").await;
        assert_eq!(status, 421, "Host {host:?}: {body}");
        assert!(body.starts_with("sk web: the Host "), "{body}");
        assert!(!body.contains("secret payload"), "{body}");
    }
    let (status, _) = send(&url, "GET", &job, "", "").await;
    assert_eq!(status, 421, "no Host at all");
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("jobs.internal:{port}"),
        "jobs.internal".to_owned(),
    ] {
        let (status, body) = send(&url, "GET", &job, &format!("Host: {host}\r\n"), "").await;
        assert_eq!(status, 200, "Host {host:?}: {body}");
        assert!(body.contains("secret payload"), "{body}");
    }

    let form = format!("csrf={}", csrf(&url).await);
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let pause = "/queues/default/pause";
    for (from, status) in [
        ("Origin: http://evil.example\r\n".to_owned(), 403),
        ("Origin: null\r\n".to_owned(), 403),
        ("Referer: http://evil.example/\r\n".to_owned(), 403),
        (String::new(), 403),
        (format!("Origin: http://127.0.0.1:{port}\r\n"), 303),
    ] {
        let paused = client
            .queues()
            .await
            .unwrap()
            .iter()
            .any(|q| q.paused_at.is_some());
        assert!(!paused, "nothing paused before {from:?}");
        let (seen, body) = send(&url, "POST", pause, &format!("{host}{from}"), &form).await;
        assert_eq!(seen, status, "{from:?}: {body}");
    }
    let paused: Vec<String> = client
        .queues()
        .await
        .unwrap()
        .into_iter()
        .filter(|q| q.paused_at.is_some())
        .map(|q| q.name)
        .collect();
    assert_eq!(
        paused,
        ["default"],
        "the dashboard's own action took effect"
    );
    db.drop().await;
}

each_backend! {
    /// Bad input to the dashboard is a 400 with sk's plain message, on every backend: a
    /// NUL in a list filter (PostgreSQL answered 500 with its own error text) and a queue
    /// name sk refuses in an action (500 everywhere).
    async fn the_dashboard_answers_bad_input_with_a_400(db) {
        let client = Client::new(db.pool.clone());
        Record::new("x".into()).enqueue(&db.pool).await.unwrap();
        let url = serve(client.clone(), WebOptions::default()).await;
        for filter in ["queue", "type", "tenant"] {
            let (status, body) =
                request(&url, "GET", &format!("/jobs?{filter}=a%00b"), "").await;
            assert_eq!(status, 400, "{filter}: {body}");
            assert!(body.contains("must not contain a NUL character"), "{body}");
        }
        let form = format!("csrf={}", csrf(&url).await);
        let host = url.trim_start_matches("http://");
        let own = format!("Host: {host}\r\nOrigin: {url}\r\n");
        let long = "q".repeat(300);
        for queue in ["a%00b", long.as_str()] {
            let path = format!("/queues/{queue}/pause");
            let (status, body) = send(&url, "POST", &path, &own, &form).await;
            assert_eq!(status, 400, "{queue}: {body}");
            assert!(body.contains("invalid queue name"), "{body}");
        }
        // A control character, a blank name, a bidirectional override, a typo: a queue no
        // job, control or worker has is refused, not made (as `sk pause` does).
        for queue in ["%01", "%20", "%0A", "default%E2%80%AE", "defualt"] {
            let path = format!("/queues/{queue}/pause");
            let (status, body) = send(&url, "POST", &path, &own, &form).await;
            assert_eq!(status, 404, "{queue}: {body}");
            assert!(body.contains("no queue"), "{body}");
        }
        assert!(client.queues().await.unwrap().iter().all(|q| q.paused_at.is_none()));
        assert_eq!(client.queues().await.unwrap().len(), 1, "only the job's queue");
        // A task type's page of a name no job can have: 400 with sk's message, not the
        // database's error text in a 500.
        let (status, body) = request(&url, "GET", "/types/%00", "").await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("invalid task type") && body.contains("NUL"), "{body}");
        // A bulk delete (or cancel) with no filter at all is refused: it took every
        // ended job of every queue after one generic confirm().
        let ended = AlwaysFails::new().with_max_attempts(1).enqueue(&db.pool).await.unwrap();
        let (probe, _rx) = probe();
        let w = RunningWorker::start(worker(&db, &[AlwaysFails::TASK_TYPE]).data(probe));
        client.wait(ended, T).await.unwrap();
        w.stop().await;
        // The overview's card agrees with its tables: the stopped worker wrote its run.
        let (status, page) = request(&url, "GET", "/", "").await;
        assert_eq!(status, 200, "{page}");
        let figure = |id: &str| -> String {
            let at = page.find(&format!("id=\"{id}\">")).unwrap_or_else(|| panic!("#{id}: {page}"));
            let rest = &page[at + id.len() + 6..];
            rest[..rest.find('<').unwrap()].to_owned()
        };
        assert_eq!((figure("succeeded"), figure("failed"), figure("fatal")), ("0".into(), "1".into(), "1".into()));
        assert_eq!(figure("failure-rate"), "100.0");
        for action in ["delete", "cancel"] {
            let bulk = format!("{form}&do={action}&scope=filter");
            let (status, body) = send(&url, "POST", "/jobs/bulk", &own, &bulk).await;
            assert_eq!(status, 400, "{action}: {body}");
            assert!(body.contains("needs a filter"), "{body}");
        }
        assert!(client.job(ended).await.unwrap().is_some(), "the ended job is kept");
        let narrowed = format!("{form}&do=delete&scope=filter&state=fatal");
        let (status, body) = send(&url, "POST", "/jobs/bulk", &own, &narrowed).await;
        assert_eq!(status, 303, "{body}");
        assert!(client.job(ended).await.unwrap().is_none(), "deleted by its state");
        db.drop().await;
    }
}
