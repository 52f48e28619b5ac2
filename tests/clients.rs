//! The schema of a job's arguments (`#[job]`, `sk_runtime::schema`): what a worker
//! publishes, what `sk schema` prints, what `Client::enqueue_json` checks; and the contract
//! from both sides, jobs enqueued by the Python and TypeScript clients (clients/) and run
//! by a Rust worker. A module of the `queue` test binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sk_runtime::{job, Client, Data, Error, Job, JobContext, JobError, JobStatus};
use sk_tests::{each_backend, wait_until, Db, RunningWorker};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::cli::sk;
use super::{worker, T};

/// A line of an order: a type with a schema of its own (`JsonSchema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Line {
    sku: String,
    qty: u32,
}

/// A type without a schema: the argument lets any JSON through, and the worker checks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Wrapping {
    paper: String,
}

/// What `place_order` received, typed.
#[derive(Debug, Clone, PartialEq)]
struct Placed {
    order_id: i64,
    shop: String,
    items: Vec<Line>,
    note: Option<String>,
    gift: bool,
    placed_at: DateTime<Utc>,
    wrapping: Option<Wrapping>,
}

#[derive(Clone)]
struct Arrived(mpsc::UnboundedSender<(Uuid, Placed)>);

#[allow(clippy::too_many_arguments)]
#[job(queue = "orders", priority = 3, max_attempts = 4, timeout = "30s", tenant = shop)]
async fn place_order(
    order_id: i64,
    shop: String,
    #[serde(rename = "lines")] items: Vec<Line>,
    note: Option<String>,
    #[serde(default)] gift: bool,
    #[serde(alias = "when")] placed_at: DateTime<Utc>,
    wrapping: Option<Wrapping>,
    ctx: JobContext,
    arrived: Data<Arrived>,
) -> Result<(), JobError> {
    let placed = Placed {
        order_id,
        shop,
        items,
        note,
        gift,
        placed_at,
        wrapping,
    };
    let _ = arrived.0.send((ctx.id(), placed));
    Ok(())
}

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The schema document the clients' own tests read: it must be what sk derives.
fn testdata() -> serde_json::Value {
    let path = root().join("clients/testdata/sk-schema.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("clients/testdata/sk-schema.json"))
        .expect("JSON")
}

/// The worker's published schemas, once it has published `place_order`'s.
async fn published(client: &Client) -> serde_json::Value {
    wait_until("the worker to publish its schemas", T, || async {
        let document = client.published_schema().await.expect("read the schemas");
        document["jobs"]
            .get("place_order")
            .is_some()
            .then_some(document)
    })
    .await
}

each_backend! {
    /// A worker publishes the schema of each job it runs: its defaults and the JSON Schema
    /// of its arguments as serde reads them (rename, alias, default, Option, a nested type
    /// with a schema, one without); `sk schema --from-database` prints it, and
    /// `enqueue_json` of a type only published (not linked) checks a payload against it.
    async fn a_worker_publishes_its_jobs_schemas(db) {
        // A worker built with publish_schemas(false) publishes none: once it has stopped,
        // its start (row, then schemas) is over.
        let client = Client::new(db.pool.clone());
        let (probe, _events) = crate::probe();
        let quiet = RunningWorker::start(
            worker(&db, &[crate::Record::TASK_TYPE]).data(probe).publish_schemas(false),
        );
        wait_until("the quiet worker's row", T, || async {
            let workers = client.workers().await.expect("the workers");
            workers.iter().any(|w| w.task_types == ["record"]).then_some(())
        })
        .await;
        quiet.stop().await;
        let none = client.published_schema().await.unwrap();
        assert_eq!(none["jobs"], json!({}));
        let (code, _, err) = sk(&db.url, &["schema", "--from-database"]).await;
        assert_eq!(code, 1);
        assert!(err.contains("no worker has published its jobs' schemas"), "{err}");

        let (tx, _rx) = mpsc::unbounded_channel();
        let w = RunningWorker::start(worker(&db, &[PlaceOrder::TASK_TYPE]).data(Arrived(tx)));
        let document = published(&client).await;
        assert_eq!(document["format"], sk_runtime::SCHEMA_FORMAT);
        let entry = &document["jobs"]["place_order"];
        // The clients' tests run on this very entry.
        assert_eq!(entry, &testdata()["jobs"]["place_order"], "{entry:#}");
        let args = &entry["args"];
        assert_eq!(args["required"], json!(["order_id", "shop", "lines"]));
        assert_eq!(
            args["allOf"],
            json!([{"anyOf": [{"required": ["placed_at"]}, {"required": ["when"]}]}])
        );
        assert_eq!(args["properties"]["lines"]["items"]["$ref"], "#/$defs/Line");
        let unchecked = args["properties"]["wrapping"]["description"].as_str().unwrap();
        assert!(unchecked.contains("no schemars::JsonSchema"), "{unchecked}");
        assert!(args["properties"].get("items").is_none() && args["properties"].get("ctx").is_none());

        let (code, out, err) = sk(&db.url, &["schema", "--from-database"]).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), document);
        // The dashboard's task type page shows it.
        let url = crate::web::serve(client.clone(), sk_cli::web::WebOptions::default()).await;
        let (status, page) = crate::web::request(&url, "GET", "/types/place_order", "").await;
        assert_eq!(status, 200);
        assert!(page.contains("id=\"type-schema\"") && page.contains("&quot;order_id&quot;"), "{page}");
        let (_, page) = crate::web::request(&url, "GET", "/types/record", "").await;
        assert!(page.contains("No worker has published this type"), "{page}");
        // This binary links two jobs of one name (`same_name`): its schema is refused.
        let (code, _, err) = sk(&db.url, &["schema"]).await;
        assert_eq!(code, 1);
        assert!(err.contains("same_name"), "{err}");
        w.stop().await;

        // Another binary's job, published and not linked here.
        db.execute(
            r#"INSERT INTO sk_task_types_t VALUES ('sent_elsewhere',
               '{"queue": "far", "priority": 5, "max_attempts": 2, "encrypted": false, "tenant_from": "n",
                 "args": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}',
               'another-worker', CURRENT_TIMESTAMP)"#,
        )
        .await;
        for (payload, words) in [
            (json!({"n": "7"}), "field `n`: \"7\" is not of type \"integer\""),
            (json!({}), "\"n\" is a required property"),
        ] {
            let error = client.enqueue_json("sent_elsewhere", payload).await.unwrap_err();
            assert!(
                matches!(&error, Error::Invalid { what: "payload", .. })
                    && error.to_string().contains(words),
                "{error}"
            );
        }
        let id = client.enqueue_json("sent_elsewhere", json!({"n": 7})).await.unwrap();
        let job = client.job(id).await.unwrap().unwrap();
        assert_eq!((job.queue.as_str(), job.priority, job.max_attempts), ("far", 5, Some(2)));
        assert_eq!(job.tenant.as_deref(), Some("7"));
        let error = client.enqueue_json("nowhere", json!({})).await.unwrap_err();
        let said = error.to_string();
        assert!(
            said.contains("linked into this binary or published by a worker")
                && said.contains(" place_order, ")
                && said.contains(" sent_elsewhere, "),
            "{error}"
        );
        // `sk enqueue` checks it too; a type nobody published is posted as it is.
        let (code, _, err) = sk(&db.url, &["enqueue", "sent_elsewhere", r#"{"n": "x"}"#]).await;
        assert_eq!(code, 1);
        assert!(err.contains("field `n`"), "{err}");
        let (code, _, err) = sk(&db.url, &["enqueue", "not_published", r#"{"n": "x"}"#]).await;
        assert_eq!(code, 0, "{err}");
        db.drop().await;
    }
}

/// Installs the clients' packages where they are missing (clients/setup.sh, as `.ci/run`
/// does first).
fn clients_installed() -> PathBuf {
    let dir = root().join("clients");
    if !dir.join("python/.venv/bin/pytest").exists()
        || !dir.join("typescript/node_modules/pg").exists()
    {
        let status = Command::new("bash")
            .arg(dir.join("setup.sh"))
            .status()
            .expect("bash runs clients/setup.sh");
        assert!(
            status.success(),
            "clients/setup.sh could not install the clients' packages; the cross-language test needs them"
        );
    }
    dir
}

/// Runs a producer program: what it printed (one JSON object).
fn produce(program: &str, args: &[&str]) -> serde_json::Value {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{out}\n{err}"
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{program} printed {out}: {e}"))
}

/// Jobs enqueued from Python and from TypeScript (one with every option, from the schema
/// file; two in one insert, from the schema the worker published) run in a Rust worker
/// with every argument as typed; the payload the schema refuses, and a job in a
/// transaction rolled back, are never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_enqueued_from_python_and_typescript_run_in_rust() {
    let dir = clients_installed();
    let db = Db::<sqlx::Postgres>::new().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let w = RunningWorker::start(worker(&db, &[PlaceOrder::TASK_TYPE]).data(Arrived(tx)));
    let client = Client::new(db.pool.clone());
    let document = published(&client).await;
    let file = std::env::temp_dir().join(format!("sk-schema-{}.json", Uuid::new_v4()));
    std::fs::write(&file, document.to_string()).unwrap();
    let file = file.to_str().unwrap();

    let python = dir.join("python/.venv/bin/python");
    let python = produce(
        python.to_str().unwrap(),
        &[
            dir.join("python/tests/produce.py").to_str().unwrap(),
            &db.url,
            file,
        ],
    );
    let typescript = dir.join("typescript");
    let typescript = produce(
        "node",
        &[
            "--import",
            typescript
                .join("node_modules/tsx/dist/esm/index.mjs")
                .to_str()
                .unwrap(),
            typescript.join("test/produce.ts").to_str().unwrap(),
            &db.url,
            file,
        ],
    );

    let mut expected = std::collections::HashMap::new();
    for (out, lang, first) in [(&python, "python", 1), (&typescript, "typescript", 2)] {
        assert_eq!(out["field"], "order_id", "{out}");
        assert!(
            out["refused"].as_str().unwrap().contains("'order_id'"),
            "{out}"
        );
        let ids: Vec<Uuid> = serde_json::from_value(out["ids"].clone()).unwrap();
        assert_eq!(ids.len(), 3, "{out}");
        let when = DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
            .unwrap()
            .to_utc();
        let shop = format!("{lang}-shop");
        expected.insert(
            ids[0],
            Placed {
                order_id: first,
                shop: shop.clone(),
                items: vec![Line {
                    sku: "A-1".into(),
                    qty: 3,
                }],
                note: Some(format!("from {lang}")),
                gift: true,
                placed_at: when,
                wrapping: Some(Wrapping {
                    paper: "red".into(),
                }),
            },
        );
        for (id, order_id) in ids[1..].iter().zip([first * 10, first * 10 + 1]) {
            expected.insert(
                *id,
                Placed {
                    order_id,
                    shop: shop.clone(),
                    items: Vec::new(),
                    note: None,
                    gift: false,
                    placed_at: when,
                    wrapping: None,
                },
            );
        }
        let record = db
            .wait_job(ids[0], T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(record.priority, 1);
        assert_eq!(record.tenant.as_deref(), Some(shop.as_str()));
        assert_eq!(
            record.correlation_id.as_deref(),
            Some(format!("{lang}-1").as_str())
        );
        let metadata: serde_json::Value =
            serde_json::from_str(record.metadata.as_deref().unwrap_or("null")).unwrap();
        assert_eq!(metadata, json!({ "lang": lang }));
        assert_eq!(
            record.unique_key.as_deref(),
            Some(format!("{lang}-order").as_str())
        );
        let batch = db
            .wait_job(ids[2], T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!((batch.queue.as_str(), batch.priority), ("orders", 3));
    }
    let mut ran = std::collections::HashMap::new();
    while ran.len() < expected.len() {
        let (id, placed) = sk_tests::recv(&mut rx, "a job the clients enqueued", T).await;
        ran.insert(id, placed);
    }
    assert_eq!(ran, expected);
    w.stop().await;
    // The refused payloads and the rolled-back jobs were never stored.
    assert_eq!(
        db.scalar("SELECT count(*) FROM sk_task_results_t", None)
            .await,
        Some(6)
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
            .await,
        Some(0)
    );
    let _ = std::fs::remove_file(file);
    db.drop().await;
}
