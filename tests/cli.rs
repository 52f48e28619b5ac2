//! The `sk` command on every backend: what each command prints (as a table and as JSON),
//! what it changes, and its exit codes. Runs the command in-process (`sk_cli::run`). A
//! module of the `queue` test binary.

use chrono::Utc;
use sk_runtime::{job, Client, Job, JobError, JobStatus};
use sk_tests::{each_backend, RunningWorker};
use uuid::Uuid;

use super::{probe, worker, AlwaysFails, Record, T};

/// Runs `sk --database-url URL ARGS...`: its exit code, output and error output.
pub(crate) async fn sk(url: &str, args: &[&str]) -> (u8, String, String) {
    let mut all = vec!["sk", "--database-url", url];
    all.extend_from_slice(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = sk_cli::run(all, &mut out, &mut err).await;
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8 output");
    (code, text(out), text(err))
}

/// `sk ARGS... --json`, parsed; the command must succeed.
pub(crate) async fn sk_json(url: &str, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = sk(url, &all).await;
    assert_eq!(code, 0, "sk {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("sk {args:?} --json: {e}: {out}"))
}

/// Outside text that would drive a terminal (clear the screen, set the title, ring) and
/// read as HTML and SQL.
pub(crate) const HOSTILE: &str =
    "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>\x1b[2J\x1b]0;pwned\x07'; DROP TABLE sk_tasks_queue_t; --";

/// Fails for good with `text` as its error message.
#[job(max_attempts = 1)]
pub(crate) async fn hostile(text: String) -> Result<(), JobError> {
    Err(JobError::new(text))
}

/// A job with [`HOSTILE`] in every field that is shown (queue, tenant, metadata, payload
/// and, once it has run, its error message), run until it failed for good.
pub(crate) async fn hostile_job<B: sk_tests::TestBackend>(db: &sk_tests::Db<B>) -> Uuid
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let id = Hostile::new(HOSTILE.into())
        .with_queue(HOSTILE)
        .with_tenant(HOSTILE)
        .with_metadata(serde_json::json!({ "note": HOSTILE }))
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (probe, _rx) = probe();
    let w = RunningWorker::start(
        worker(db, &[Hostile::TASK_TYPE])
            .data(probe)
            .queues([HOSTILE]),
    );
    let record = Client::new(db.pool.clone()).wait(id, T).await.unwrap();
    w.stop().await;
    assert_eq!(record.status(), JobStatus::Fatal);
    id
}

fn queue<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["queues"]
        .as_array()
        .and_then(|q| q.iter().find(|q| q["key"] == name))
        .unwrap_or_else(|| panic!("no queue {name} in {status}"))
}

each_backend! {
    async fn the_sk_command_answers_and_acts(db) {
        let url = db.url.clone();
        let client = Client::new(db.pool.clone());
        let fatal = AlwaysFails::new().with_max_attempts(1).enqueue(&db.pool).await.unwrap();
        let (probe, _rx) = probe();
        let w = RunningWorker::start(worker(&db, &[AlwaysFails::TASK_TYPE]).data(probe));
        client.wait(fatal, T).await.unwrap();
        w.stop().await;
        let later = Utc::now() + chrono::Duration::hours(1);
        let waiting = Record::new("mail".into()).with_queue("mail").run_at(later)
            .enqueue(&db.pool).await.unwrap();

        // What is where.
        let status = sk_json(&url, &["status"]).await;
        assert_eq!(queue(&status, "default")["fatal"], 1);
        assert_eq!(queue(&status, "mail")["scheduled"], 1);
        let (code, out, _) = sk(&url, &["status"]).await;
        assert_eq!(code, 0);
        assert!(out.contains("mail") && out.contains("default"), "{out}");
        // The last hour's runs by task type, which the stopped worker wrote at its stop.
        let runs = status["last_hour"].as_array().unwrap();
        let failed = runs.iter().find(|t| t["task_type"] == AlwaysFails::TASK_TYPE);
        assert_eq!(failed.map(|t| &t["failed"]), Some(&serde_json::json!(1)), "{status}");
        assert!(out.contains("failed 1h"), "{out}");

        // The fatal job, listed and shown whole.
        let page = sk_json(&url, &["jobs", "--state", "fatal"]).await;
        assert_eq!(page["jobs"][0]["id"], fatal.to_string(), "{page}");
        assert_eq!(page["jobs"][0]["attempt"], 1, "an ended job's attempts: {page}");
        let (code, out, _) = sk(&url, &["job", &fatal.to_string()]).await;
        assert_eq!(code, 0);
        assert!(out.contains("still broken at attempt 1") && out.contains("fatal"), "{out}");
        let errors = sk_json(&url, &["errors"]).await;
        assert_eq!(errors[0]["message"], "still broken at attempt 1", "{errors}");
        assert_eq!(errors[0]["sample"], fatal.to_string());

        // Control. A queue sk has never seen is refused, as a typo (`sk pause maill`)
        // paused a queue that never existed while `mail` ran on.
        let (code, _, err) = sk(&url, &["pause", "maill"]).await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no queue \"maill\"") && err.contains("known queues: default, mail")
            && err.contains("--force"), "{err}");
        let (code, _, _) = sk(&url, &["resume", "maill"]).await;
        assert_eq!(code, 2);
        assert!(client.queues().await.unwrap().iter().all(|q| q.paused_at.is_none()), "nothing paused");
        let (code, out, _) = sk(&url, &["pause", "maill", "--force"]).await;
        assert_eq!((code, out.trim()), (0, "maill: paused"));
        assert_eq!(sk(&url, &["resume", "maill"]).await.0, 0, "a paused queue is known");
        let (code, out, _) = sk(&url, &["pause", "mail"]).await;
        assert_eq!((code, out.trim()), (0, "mail: paused"));
        let status = sk_json(&url, &["status"]).await;
        let mail = status["controls"].as_array().unwrap().iter().find(|q| q["name"] == "mail").unwrap();
        assert!(mail["paused_at"].is_string(), "{status}");
        assert_eq!(sk(&url, &["resume", "mail"]).await.0, 0);
        assert_eq!(sk(&url, &["limit", "mail", "3"]).await.0, 0);
        assert_eq!(client.queues().await.unwrap().iter().find(|q| q.name == "mail").unwrap().global_limit, Some(3));
        assert_eq!(sk(&url, &["limit", "mail", "none"]).await.0, 0);
        let (code, _, err) = sk(&url, &["limit", "mail", "zero"]).await;
        assert_eq!(code, 1);
        assert!(err.starts_with("sk: error: limit \"zero\""), "{err}");
        let (code, out, _) = sk(&url, &["limit", "mail", "--rate", "50/1s"]).await;
        assert_eq!((code, out.trim()), (0, "mail: at most 50 starts in any 1s across all workers"));
        let rate = client.queues().await.unwrap().into_iter().find(|q| q.name == "mail").unwrap().rate_limit.unwrap();
        assert_eq!((rate.limit.count, rate.limit.window, rate.started), (50, std::time::Duration::from_secs(1), 0));
        let (code, out, _) = sk(&url, &["status"]).await;
        assert!(code == 0 && out.contains("0/50 per 1s"), "{out}");
        let (code, _, err) = sk(&url, &["limit", "mail", "--rate", "50 a second"]).await;
        assert_eq!(code, 1);
        assert!(err.starts_with("sk: error: invalid rate limit: \"50 a second\""), "{err}");
        assert_eq!(sk(&url, &["limit", "mail", "--rate", "none"]).await.0, 0);
        assert!(client.queues().await.unwrap().iter().all(|q| q.rate_limit.is_none()));
        let (code, out, _) = sk(&url, &["limit", "mail", "--per-tenant", "4"]).await;
        assert_eq!((code, out.trim()), (0, "mail: at most 4 of each tenant at once across all workers"));
        let mail = client.queues().await.unwrap().into_iter().find(|q| q.name == "mail").unwrap();
        assert_eq!((mail.tenant_limit, mail.global_limit), (Some(4), None));
        let status = sk_json(&url, &["status"]).await;
        let mail = status["controls"].as_array().unwrap().iter().find(|q| q["name"] == "mail").unwrap();
        assert_eq!(mail["tenant_limit"], 4, "{status}");
        let (code, _, err) = sk(&url, &["limit", "mail", "--per-tenant", "0"]).await;
        assert_eq!(code, 1);
        assert!(err.starts_with("sk: error: invalid tenant limit: 0 is not between 1 and"), "{err}");
        assert_eq!(sk(&url, &["limit", "mail", "--per-tenant", "none"]).await.0, 0);
        assert!(client.queues().await.unwrap().iter().all(|q| q.tenant_limit.is_none()));
        let (code, out, _) = sk(&url, &["limit", "mail", "--per-tenant-rate", "10/1s"]).await;
        assert_eq!((code, out.trim()), (0, "mail: at most 10 starts of each tenant in any 1s across all workers"));
        let (code, out, _) = sk(&url, &["status"]).await;
        assert!(code == 0 && out.contains("10/1s"), "{out}");
        assert_eq!(sk(&url, &["limit", "mail", "--per-tenant-rate", "none"]).await.0, 0);
        assert!(client.queues().await.unwrap().iter().all(|q| q.tenant_rate_limit.is_none()));
        let (code, out, _) = sk(&url, &["limit", "mail", "--fair", "on"]).await;
        assert_eq!((code, out.trim()), (0, "mail: claimed fairly across its tenants"));
        let (code, out, _) = sk(&url, &["status"]).await;
        assert!(code == 0 && out.contains("fair"), "{out}");
        let status = sk_json(&url, &["status"]).await;
        let mail = status["controls"].as_array().unwrap().iter().find(|q| q["name"] == "mail").unwrap();
        assert!(mail["fair_since"].is_string(), "{status}");
        let (code, _, err) = sk(&url, &["limit", "mail", "--fair", "yes", "--per-tenant", "2"]).await;
        assert_eq!((code, err.trim()), (1, "sk: error: --fair \"yes\": on or off"));
        assert!(client.queues().await.unwrap().iter().all(|q| q.tenant_limit.is_none()), "nothing set");
        let off = sk_json(&url, &["limit", "mail", "--fair", "off"]).await;
        assert_eq!(off, serde_json::json!({ "queue": "mail", "fair": false }));
        assert!(client.queues().await.unwrap().iter().all(|q| q.fair_since.is_none()));

        let (code, out, _) = sk(&url, &["run-now", &waiting.to_string()]).await;
        assert_eq!((code, out.trim()), (0, format!("{waiting}: Rescheduled").as_str()));
        assert!(db.job(waiting).await.locked_until.unwrap() <= Utc::now());
        let (code, out, _) = sk(&url, &["priority", "--to", "-5", &waiting.to_string()]).await;
        assert_eq!((code, out.trim()), (0, format!("{waiting}: Reprioritized").as_str()));
        assert_eq!(db.job(waiting).await.priority, -5);
        let (code, out, _) = sk(&url, &["priority", "--to", "1", &fatal.to_string()]).await;
        assert_eq!((code, out.trim()), (0, format!("{fatal}: Finished(Fatal)").as_str()));
        let (code, out, _) = sk(&url, &["retry", &fatal.to_string()]).await;
        assert_eq!((code, out.trim()), (0, format!("{fatal}: Retried").as_str()));
        assert_eq!(db.job(fatal).await.status(), JobStatus::Unprocessed);
        let (code, out, _) = sk(&url, &["cancel", &waiting.to_string()]).await;
        assert_eq!((code, out.trim()), (0, format!("{waiting}: Cancelled").as_str()));
        assert_eq!(db.job(waiting).await.status(), JobStatus::Cancelled);

        // Enqueue by name.
        let posted = sk_json(&url, &["enqueue", "record", r#"{"label": "from the shell"}"#]).await;
        let id: Uuid = posted["id"].as_str().unwrap().parse().unwrap();
        assert_eq!(db.job(id).await.task_type, Record::TASK_TYPE);

        // Exit codes and one-line errors.
        let unknown = Uuid::now_v7().to_string();
        let (code, _, err) = sk(&url, &["job", &unknown]).await;
        assert_eq!((code, err.trim()), (3, format!("sk: error: no job {unknown}").as_str()));
        let (code, out, err) = sk(&url, &["retry", &unknown]).await;
        assert_eq!(code, 3, "{out}{err}");
        let (code, _, err) = sk(&url, &["enqueue", "record", "not json"]).await;
        assert_eq!(code, 1);
        assert!(err.starts_with("sk: error: the payload is not JSON"), "{err}");
        let (code, _, _) = sk(&url, &["jobs", "--state", "nonsense"]).await;
        assert_eq!(code, 2);
        db.drop().await;
    }
}

each_backend! {
    async fn sk_acts_on_every_job_a_filter_takes_after_asking(db) {
        let url = db.url.clone();
        let later = Utc::now() + chrono::Duration::hours(1);
        let mut mail = Vec::new();
        for i in 0..25 {
            let id = Record::new(format!("m{i}")).with_queue("mail").run_at(later)
                .enqueue(&db.pool).await.unwrap();
            mail.push(id);
        }
        let other = Record::new("other".into()).with_queue("sms").run_at(later)
            .enqueue(&db.pool).await.unwrap();

        // A bulk action is asked about; without a terminal and without --yes, refused.
        let (code, _, err) = sk(&url, &["cancel", "--queue", "mail"]).await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cancel 25 jobs?") && err.contains("add --yes"), "{err}");
        assert_eq!(db.job(mail[0]).await.status(), JobStatus::Unprocessed);
        // Whatever the count: one job taken is asked about too (it acted at once).
        let (code, _, err) = sk(&url, &["cancel", "--queue", "sms"]).await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cancel 1 job?") && err.contains("add --yes"), "{err}");
        assert_eq!(db.job(other).await.status(), JobStatus::Unprocessed);
        // Ids and a filter together, or neither, are usage errors.
        let (code, _, _) = sk(&url, &["cancel", &other.to_string(), "--queue", "sms"]).await;
        assert_eq!(code, 2);
        let (code, _, _) = sk(&url, &["cancel"]).await;
        assert_eq!(code, 2);

        // Run now, then cancel, the queue's jobs: each job once, the others untouched.
        let done = sk_json(&url, &["run-now", "--queue", "mail", "--yes"]).await;
        assert_eq!(done["matched"], 25, "{done}");
        assert_eq!(done["outcomes"]["Rescheduled"], 25, "{done}");
        let done = sk_json(&url, &["cancel", "--queue", "mail", "--state", "waiting", "--yes"]).await;
        assert_eq!(done["outcomes"]["Cancelled"], 25, "{done}");
        for id in &mail {
            assert_eq!(db.job(*id).await.status(), JobStatus::Cancelled);
        }
        assert_eq!(db.job(other).await.status(), JobStatus::Unprocessed);
        // Retry takes the cancelled ones back; a filter that takes nothing does nothing.
        let (code, out, _) = sk(&url, &["retry", "--queue", "mail", "--state", "cancelled", "--yes"]).await;
        assert_eq!(code, 0);
        assert!(out.starts_with("25 jobs:") && out.contains("Retried: 25"), "{out}");
        assert_eq!(db.job(mail[7]).await.status(), JobStatus::Unprocessed);
        let done = sk_json(&url, &["retry", "--queue", "nowhere", "--yes"]).await;
        assert_eq!(done["matched"], 0);

        // Prune: asked about, then the results of jobs ended before the cutoff go.
        let (code, _, err) = sk(&url, &["prune", "--older-than", "1h"]).await;
        assert_eq!(code, 2, "{err}");
        sk_json(&url, &["cancel", &other.to_string()]).await;
        let pruned = sk_json(&url, &["prune", "--older-than", "1h", "--yes"]).await;
        assert_eq!(pruned["rows"], 0, "nothing ended an hour ago: {pruned}");
        assert_eq!(db.job(other).await.status(), JobStatus::Cancelled);
        let client = Client::new(db.pool.clone());
        let pruned = client.prune(Utc::now() + chrono::Duration::seconds(1)).await.unwrap();
        assert_eq!(pruned.rows, 1, "the cancelled job: {pruned:?}");
        assert!(client.job(other).await.unwrap().is_none(), "its results pruned");
        assert!(client.job(mail[7]).await.unwrap().is_some(), "a live job is never pruned");

        // Migrations: every one applied.
        let all = sk_json(&url, &["migrate", "--status"]).await;
        let all = all.as_array().unwrap();
        assert!(!all.is_empty() && all.iter().all(|m| m["applied_at"].is_string()), "{all:?}");
        let (code, out, _) = sk(&url, &["migrate", "--status"]).await;
        assert_eq!(code, 0);
        assert!(out.contains("up to date"), "{out}");
        // Seed 000's keys: PostgreSQL's; refused elsewhere with the reason.
        let (code, out, err) = sk(&url, &["migrate", "--seed-keys", "000"]).await;
        if url.starts_with("postgres") {
            assert_eq!((code, out.trim()), (0, "sk's tables are at this version, keyed as seed 000's"), "{err}");
            let (code, _, err) = sk(&url, &["migrate", "--seed-keys", "001"]).await;
            assert_eq!(code, 0, "{err}");
        } else {
            assert_eq!(code, 1);
            assert!(err.contains("invalid seed keys: seed 000's one row per metric id is a PostgreSQL contract"), "{err}");
        }
        db.drop().await;
    }
}

#[tokio::test]
async fn migrate_status_names_the_pending_migrations_of_an_empty_database() {
    let path = std::env::temp_dir().join(format!("sk-cli-{}.db", Uuid::new_v4()));
    let url = format!("sqlite:{}?mode=rwc", path.display());
    let (code, out, err) = sk(&url, &["migrate", "--status"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pending: run `sk migrate`"), "{out}");
    assert!(!out.contains("up to date"));
    // Any other command says the tables are missing, in one line.
    let (code, _, err) = sk(&url, &["status"]).await;
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("sk's tables are not here: run `sk migrate`"),
        "{err}"
    );
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn sk_says_in_one_line_why_it_cannot_reach_the_database() {
    let (code, _, err) = sk("postgres://postgres:secret@127.0.0.1:1/app", &["status"]).await;
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "sk: error: cannot reach the database at postgres://postgres:***@127.0.0.1:1/app"
        ),
        "{err}"
    );
    assert!(!err.contains("secret"));
    let (code, _, err) = sk("redis://127.0.0.1", &["status"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("names no known database"), "{err}");
}

#[tokio::test]
async fn sk_web_off_loopback_needs_a_token_or_read_only() {
    let url = format!(
        "sqlite:{}/sk-cli-web.db?mode=rwc",
        std::env::temp_dir().display()
    );
    let (code, _, err) = sk(&url, &["web", "--bind", "0.0.0.0:0"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("give --token (or SK_WEB_TOKEN) or --read-only"),
        "{err}"
    );
}

each_backend! {
    async fn hostile_text_is_inert_in_the_terminal_and_filter_values_are_data(db) {
        let url = db.url.clone();
        let client = Client::new(db.pool.clone());
        let id = hostile_job(&db).await;
        let record = client.job(id).await.unwrap().unwrap();
        assert_eq!(record.status(), JobStatus::Fatal);
        let id_text = id.to_string();
        for args in [
            vec!["status"],
            vec!["jobs"],
            vec!["jobs", "--queue", HOSTILE],
            vec!["job", &id_text],
            vec!["errors"],
            vec!["stats"],
            vec!["workers"],
        ] {
            let (code, out, err) = sk(&url, &args).await;
            assert_eq!(code, 0, "sk {args:?}: {err}");
            assert!(
                !out.contains(['\x1b', '\x07']),
                "sk {args:?} printed a raw control character: {out:?}"
            );
        }
        // Shown, escaped, not dropped.
        let (_, shown, _) = sk(&url, &["job", &id_text]).await;
        assert!(shown.contains("<script>window.__pwned=1</script>"), "{shown}");
        assert!(shown.contains("\\u{1b}[2J"), "{shown}");

        // Filter values are data: SQL in them matches nothing, and the text itself matches
        // the one job that holds it.
        for (flag, value) in [
            ("--queue", "x' OR '1'='1"),
            ("--tenant", "' OR 1=1 --"),
            ("--type", "hostile' OR task_type <> '"),
            ("--correlation-id", "\\'; DELETE FROM sk_task_results_t; --"),
            ("--meta", "note=' OR 1=1 --"),
        ] {
            let page = sk_json(&url, &["jobs", flag, value]).await;
            assert_eq!(page["jobs"].as_array().map(Vec::len), Some(0), "sk jobs {flag} {value:?}: {page}");
        }
        for (flag, value) in [("--queue", HOSTILE), ("--tenant", HOSTILE), ("--meta", &*format!("note={HOSTILE}"))] {
            let page = sk_json(&url, &["jobs", flag, value]).await;
            assert_eq!(page["jobs"][0]["id"], id_text, "sk jobs {flag} <hostile>: {page}");
        }
        assert!(client.job(id).await.unwrap().is_some(), "the tables are as they were");
    }
}
