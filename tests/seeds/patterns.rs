//! Seed 003's and 004's patterns and seed 002's fields, on every backend: every attempt on
//! record, a lease that ran out as an attempt, tenant, correlation id and metadata, restart
//! on update and unique modes.

use std::time::Duration;

use sk_runtime::{Job, JobStatus};
use sk_tests::{each_backend, recv, RunningWorker};
use uuid::Uuid;

use super::super::{gate, probe, worker, AlwaysFails, Gated, Record, T};
use super::{FailsTwice, Receipt};

each_backend! {
    async fn every_attempt_and_the_output_are_on_record(db) {
        use sk_runtime::AttemptOutcome::{Fatal, Processed, Retried};
        let (probe, _rx) = probe();
        let ok = FailsTwice::new().enqueue(&db.pool).await.unwrap();
        let bad = AlwaysFails::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[FailsTwice::TASK_TYPE, AlwaysFails::TASK_TYPE]).data(probe),
        );
        let ok = db
            .wait_job(ok, T, |r| r.status() == JobStatus::Processed)
            .await;
        let bad = db
            .wait_job(bad, T, |r| r.status() == JobStatus::Fatal)
            .await;
        w.stop().await;

        let attempts = ok.attempts();
        assert_eq!(
            attempts
                .iter()
                .map(|a| (
                    a.attempt,
                    a.outcome,
                    a.message.as_deref(),
                    a.worker.as_deref()
                ))
                .collect::<Vec<_>>(),
            [
                (1, Retried, Some("failure 1"), Some(w_id(&ok))),
                (2, Retried, Some("failure 2"), Some(w_id(&ok))),
                (3, Processed, None, Some(w_id(&ok))),
            ]
        );
        assert_eq!(attempts[0].detail.as_deref(), Some("the service said no"));
        assert!(attempts
            .iter()
            .all(|a| a.started_at.is_some() && a.ended_at >= a.started_at));
        assert_eq!(ok.error_count, 2);
        assert_eq!(ok.payload.as_deref(), Some("{}"), "kept on record after the success");
        assert_eq!(
            ok.output::<Receipt>().unwrap(),
            Some(Receipt {
                attempt: 3,
                note: "charged".into()
            })
        );
        assert_eq!(
            bad.attempts().iter().map(|a| a.outcome).collect::<Vec<_>>(),
            [Retried, Retried, Fatal]
        );
        assert_eq!(bad.output::<Receipt>().unwrap(), None);
        db.drop().await;
    }
}

/// The worker that recorded the last attempt.
fn w_id(r: &sk_runtime::JobRecord) -> &str {
    r.last_worker.as_deref().unwrap()
}

/// Reports its tenant, correlation id and metadata, and enqueues a child job (without a
/// correlation id of its own) when `child` is set.
#[sk_runtime::job]
async fn tagged(
    child: bool,
    ctx: sk_runtime::JobContext,
    seen: sk_runtime::Data<tokio::sync::mpsc::UnboundedSender<Seen>>,
    pool: sk_runtime::Data<AnyPool>,
) -> Result<(), sk_runtime::JobError> {
    let _ = seen.send(Seen {
        id: ctx.id(),
        tenant: ctx.tenant().map(str::to_owned),
        correlation_id: ctx.correlation_id().map(str::to_owned),
        metadata: ctx.metadata().cloned(),
    });
    if child {
        match &*pool {
            AnyPool::Postgres(pool) => Tagged::new(false).enqueue(pool).await?,
            AnyPool::Sqlite(pool) => Tagged::new(false).enqueue(pool).await?,
            AnyPool::MySql(pool) => Tagged::new(false).enqueue(pool).await?,
        };
    }
    Ok(())
}

/// The test database's pool, for a job that enqueues another.
enum AnyPool {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
    MySql(sqlx::MySqlPool),
}

impl From<sqlx::PgPool> for AnyPool {
    fn from(pool: sqlx::PgPool) -> Self {
        AnyPool::Postgres(pool)
    }
}

impl From<sqlx::SqlitePool> for AnyPool {
    fn from(pool: sqlx::SqlitePool) -> Self {
        AnyPool::Sqlite(pool)
    }
}

impl From<sqlx::MySqlPool> for AnyPool {
    fn from(pool: sqlx::MySqlPool) -> Self {
        AnyPool::MySql(pool)
    }
}

/// What `tagged` saw.
#[derive(Debug)]
struct Seen {
    id: Uuid,
    tenant: Option<String>,
    correlation_id: Option<String>,
    metadata: Option<serde_json::Value>,
}

each_backend! {
    async fn tenant_correlation_id_and_metadata_travel_with_the_job(db) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Seen>();
        let metadata = serde_json::json!({"customer": 42, "tags": ["vip"]});
        let parent = Tagged::new(true)
            .with_tenant("acme")
            .with_correlation_id("order-7")
            .with_metadata(metadata.clone())
            .enqueue(&db.pool)
            .await
            .unwrap();
        let other_tenant = Tagged::new(false)
            .with_tenant("globex")
            .enqueue(&db.pool)
            .await
            .unwrap();
        // A worker for tenant acme only.
        let w = RunningWorker::start(
            worker(&db, &[Tagged::TASK_TYPE])
                .tenants(["acme"])
                .data(tx.clone())
                .data(AnyPool::from(db.pool.clone())),
        );
        let seen = recv(&mut rx, "the parent job", T).await;
        assert_eq!(
            (
                seen.id,
                seen.tenant.as_deref(),
                seen.correlation_id.as_deref(),
                seen.metadata.as_ref()
            ),
            (parent, Some("acme"), Some("order-7"), Some(&metadata))
        );
        let r = db
            .wait_job(parent, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(
            (r.tenant.as_deref(), r.correlation_id.as_deref()),
            (Some("acme"), Some("order-7"))
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(r.metadata.as_deref().unwrap()).unwrap(),
            metadata
        );
        // The child has no tenant, so this worker leaves it; a worker for all tenants runs it,
        // and the globex job.
        w.stop().await;
        let all = RunningWorker::start(
            worker(&db, &[Tagged::TASK_TYPE])
                .data(tx)
                .data(AnyPool::from(db.pool.clone())),
        );
        let mut later = [
            recv(&mut rx, "the child or the globex job", T).await,
            recv(&mut rx, "the child or the globex job", T).await,
        ];
        later.sort_by_key(|s| s.id == other_tenant);
        all.stop().await;
        let (child, globex) = (&later[0], &later[1]);
        assert_eq!(
            (child.tenant.as_deref(), child.correlation_id.as_deref()),
            (None, Some("order-7")),
            "the child inherits the correlation id"
        );
        assert_eq!(globex.tenant.as_deref(), Some("globex"));

        let error = Tagged::new(false)
            .with_metadata(serde_json::json!([1, 2]))
            .enqueue(&db.pool)
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid metadata: must be a JSON object, not [1,2]"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn restart_on_update_coalesces_reruns_and_runs_a_finished_job_again(db) {
        use sk_runtime::{EnqueueOutcome, UniqueMode};
        let (probe, mut rx) = probe();
        let post = |label: &str| {
            Gated::new(label.into())
                .with_unique_key("doc:1")
                .with_unique_mode(UniqueMode::Restart)
                .enqueue_outcome(&db.pool)
        };
        let first = post("v1").await.unwrap();
        assert_eq!(first.outcome, EnqueueOutcome::Inserted);
        // Ten updates while it waits: one run, with the newest data.
        for i in 2..=11 {
            let again = post(&format!("v{i}")).await.unwrap();
            assert_eq!(
                (again.id, again.outcome),
                (first.id, EnqueueOutcome::Updated)
            );
        }
        let (open_tx, gate) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .data(probe)
                .data(gate),
        );
        let run = recv(&mut rx, "the first run", T).await;
        assert_eq!((run.id, run.label.as_str()), (first.id, "v11"));
        // An update during the run: it runs once more after this run, not beside it.
        let during = post("v12").await.unwrap();
        assert_eq!(
            (during.id, during.outcome),
            (first.id, EnqueueOutcome::RerunScheduled)
        );
        assert_eq!(
            post("v13").await.unwrap().outcome,
            EnqueueOutcome::RerunScheduled,
            "a second update during the run asks for the same one rerun"
        );
        open_tx.send(true).unwrap();
        let rerun = recv(&mut rx, "the rerun", T).await;
        assert_ne!(rerun.id, first.id, "the rerun is a job of its own");
        assert_eq!(rerun.label, "v13", "with the newest payload");
        let done = db
            .wait_job(rerun.id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(
            (done.unique_key.as_deref(), done.unique_mode()),
            (Some("doc:1"), Some(UniqueMode::Restart))
        );
        assert_eq!(
            db.job(first.id).await.status(),
            JobStatus::Processed,
            "the first run finished before the rerun started"
        );
        // Finished: the key is free, and an update runs the job again.
        let after = post("v14").await.unwrap();
        assert_eq!(after.outcome, EnqueueOutcome::Inserted);
        assert_eq!(recv(&mut rx, "the run after", T).await.label, "v14");
        db.wait_job(after.id, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert!(rx.try_recv().is_err(), "three runs in all");
        db.drop().await;
    }
}

each_backend! {
    async fn skip_and_replace_modes_and_unique_keys_in_bulk(db) {
        use sk_runtime::{EnqueueOutcome, Error, UniqueMode};
        let first = Record::new("kept".into())
            .with_unique_key("s")
            .enqueue(&db.pool)
            .await
            .unwrap();
        let dup = Record::new("dropped".into())
            .with_unique_key("s")
            .enqueue_outcome(&db.pool)
            .await
            .unwrap();
        assert_eq!((dup.id, dup.outcome), (first, EnqueueOutcome::Duplicate));

        let later = Record::new("old".into())
            .with_unique_key("r")
            .with_unique_mode(UniqueMode::Replace)
            .run_after(Duration::from_secs(3600))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let replaced = Record::new("new".into())
            .with_unique_key("r")
            .with_unique_mode(UniqueMode::Replace)
            .enqueue_outcome(&db.pool)
            .await
            .unwrap();
        assert_eq!(
            (replaced.id, replaced.outcome),
            (later, EnqueueOutcome::Updated)
        );

        // In bulk: a key a live job holds, and a key twice in the batch.
        let batch = vec![
            sk_runtime::Enqueue::new(Record::new("also dropped".into())).with_unique_key("s"),
            sk_runtime::Enqueue::new(Record::new("b1".into())).with_unique_key("b"),
            sk_runtime::Enqueue::new(Record::new("b2".into())).with_unique_key("b"),
            sk_runtime::Enqueue::new(Record::new("plain".into())),
        ];
        let ids = Record::enqueue_many(&db.pool, batch).await.unwrap();
        assert_eq!(ids[0], first);
        assert_eq!(ids[1], ids[2]);
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
        for id in distinct {
            assert!(
                db.info()
                    .job(id)
                    .await
                    .unwrap()
                    .is_some_and(|r| r.attempt.is_some()),
                "every id returned is a stored, live job"
            );
        }

        let (probe, mut rx) = probe();
        let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
        let mut labels = Vec::new();
        for _ in 0..4 {
            labels.push(recv(&mut rx, "a job", T).await.label);
        }
        w.stop().await;
        labels.sort();
        assert_eq!(labels, ["b1", "kept", "new", "plain"]);
        assert!(rx.try_recv().is_err());

        let error = Record::enqueue_many(
            &db.pool,
            [sk_runtime::Enqueue::new(Record::new("x".into()))
                .with_unique_key("x")
                .with_unique_mode(UniqueMode::Restart)],
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Invalid {
                    what: "unique mode",
                    ..
                }
            ),
            "{error}"
        );
        let error = Record::new("x".into())
            .with_unique_mode(UniqueMode::Skip)
            .enqueue(&db.pool)
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid unique mode: needs a unique key (`with_unique_key`)"
        );
        db.drop().await;
    }
}
