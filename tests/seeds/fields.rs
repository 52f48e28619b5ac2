//! Seed 002's per-job fields on every backend (its own is MySQL): a retry group retried
//! together, an external string id to find a job by, and a sub-state the handler sets.

use sk_runtime::{Client, Job, JobContext, JobError, JobFilter, JobStatus};
use sk_tests::{each_backend, RunningWorker};

use super::super::{worker, T};

/// Charges a card: says how far it got, and fails for good when told to.
#[sk_runtime::job(max_attempts = 1)]
async fn charge(fail: bool, ctx: JobContext) -> Result<(), JobError> {
    ctx.set_sub_state("charging").await?;
    if fail {
        return Err(JobError::fatal("gateway down"));
    }
    ctx.set_sub_state("charged").await?;
    Ok(())
}

each_backend! {
    async fn a_retry_group_is_retried_together_and_an_external_id_finds_its_job(db) {
        let order = "order-2026-11-27-000000042"; // 26 characters
        let mut group = Vec::new();
        for _ in 0..3 {
            group.push(Charge::new(true).with_retry_group("batch-7").enqueue(&db.pool).await.unwrap());
        }
        let other = Charge::new(true).with_retry_group("batch-8").enqueue(&db.pool).await.unwrap();
        let paid = Charge::new(false)
            .with_external_id(order)
            .with_metadata(serde_json::json!({"customer": 42}))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(worker(&db, &[Charge::TASK_TYPE]));
        for &id in group.iter().chain([&other]) {
            let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
            assert_eq!(r.sub_state().as_deref(), Some("charging"), "kept on record");
        }
        let r = db.wait_job(paid, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(
            (r.external_id().as_deref(), r.sub_state().as_deref(), r.retry_group()),
            (Some(order), Some("charged"), None)
        );
        let metadata: serde_json::Value = serde_json::from_str(r.metadata.as_deref().unwrap()).unwrap();
        assert_eq!(metadata["customer"], 42, "the application's own metadata beside them");
        w.stop().await;
        // In SQL, as a seed-002 query reads them: MariaDB's columns, the metadata elsewhere.
        let (group_sql, external_sql) = if db.url.starts_with("mysql") {
            (
                "SELECT count(*) FROM sk_task_results_t WHERE task_retry_group = 'batch-7' AND task_sub_state = 'charging'",
                "SELECT count(*) FROM sk_task_results_t WHERE task_external_id = $1",
            )
        } else if db.url.starts_with("sqlite") {
            (
                "SELECT count(*) FROM sk_task_results_t WHERE json_extract(task_metadata, '$.retry_group') = 'batch-7'
                    AND json_extract(task_metadata, '$.sub_state') = 'charging'",
                "SELECT count(*) FROM sk_task_results_t WHERE json_extract(task_metadata, '$.external_id') = $1",
            )
        } else {
            (
                "SELECT count(*) FROM sk_task_results_t WHERE task_metadata ->> 'retry_group' = 'batch-7'
                    AND task_metadata ->> 'sub_state' = 'charging'",
                "SELECT count(*) FROM sk_task_results_t WHERE task_metadata ->> 'external_id' = $1",
            )
        };
        assert_eq!(db.scalar(group_sql, None).await, Some(3));
        assert_eq!(db.scalar(external_sql, Some(order)).await, Some(1));

        let client = Client::new(db.pool.clone());
        let ids = |filter: JobFilter| {
            let client = client.clone();
            async move {
                let mut ids: Vec<_> = client.jobs(&filter, None, 100).await.unwrap().jobs.into_iter().map(|j| j.id).collect();
                ids.sort();
                ids
            }
        };
        assert_eq!(ids(JobFilter::new().external_id(order)).await, [paid]);
        let mut failed = group.clone();
        failed.push(other);
        failed.sort();
        assert_eq!(ids(JobFilter::new().sub_state("charging")).await, failed);
        assert_eq!(ids(JobFilter::new().retry_group("batch-8")).await, [other]);

        assert_eq!(client.retry_group("batch-7").await.unwrap(), 3);
        for &id in &group {
            assert_eq!(db.job(id).await.status(), JobStatus::Unprocessed, "back in the queue");
        }
        assert_eq!(db.job(other).await.status(), JobStatus::Fatal, "another group stays");
        assert_eq!(client.retry_group("batch-7").await.unwrap(), 0, "none left to retry");
        // Live jobs are found by their group too.
        let mut waiting = group.clone();
        waiting.sort();
        assert_eq!(ids(JobFilter::new().retry_group("batch-7")).await, waiting);

        let long = "x".repeat(41);
        let error = Charge::new(false).with_external_id(long.as_str()).enqueue(&db.pool).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid external id: is 41 characters long, over the limit of 40 (seed 002's column)"
        );
        let error = Charge::new(false).with_retry_group("").enqueue(&db.pool).await.unwrap_err();
        assert_eq!(error.to_string(), "invalid retry group: must not be empty");
        db.drop().await;
    }
}

each_backend! {
    /// Seed 002's `version` (compare and set of an application's change to a waiting job)
    /// and `updated_at` (when the row last changed, also under another writer's UPDATE).
    async fn an_update_names_the_version_it_read_and_updated_at_follows_every_change(db) {
        use sk_runtime::{JobUpdate, UpdateOutcome};
        let client = Client::new(db.pool.clone());
        let id = Charge::new(false)
            .run_after(std::time::Duration::from_secs(3600))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let first = db.job(id).await;
        assert_eq!(first.version, Some(0));
        let tracked = first.updated_at.is_some();
        assert_eq!(tracked, !db.url.starts_with("sqlite"), "PostgreSQL and MariaDB keep it");

        let raise = JobUpdate::new().if_version(0).priority(5);
        assert_eq!(client.update(id, &raise).await.unwrap(), UpdateOutcome::Updated { version: 1 });
        let stale = JobUpdate::new().if_version(0).payload(serde_json::json!({"fail": true}));
        assert_eq!(client.update(id, &stale).await.unwrap(), UpdateOutcome::VersionChanged { version: 1 });
        let second = db.job(id).await;
        assert_eq!((second.priority, second.payload.as_deref()), (5, Some(r#"{"fail":false}"#)), "the stale change wrote nothing");
        if tracked {
            assert!(second.updated_at > first.updated_at, "{:?} after {:?}", second.updated_at, first.updated_at);
        }
        // Every change of a waiting job counts.
        client.reprioritize(id, 3).await.unwrap();
        client.reschedule(id, chrono::Utc::now() + chrono::Duration::hours(2)).await.unwrap();
        assert_eq!(db.job(id).await.version, Some(3));
        let bad = JobUpdate::new().payload(serde_json::json!({"fail": "no"}));
        let error = client.update(id, &bad).await.unwrap_err().to_string();
        assert!(error.starts_with("invalid payload: does not fit the arguments of `charge`"), "{error}");
        // Metadata is refused as at enqueue: a NUL character, or anything but an object.
        let nul = JobUpdate::new().metadata(serde_json::json!({"note": "a\u{0}b"}));
        let error = client.update(id, &nul).await.unwrap_err().to_string();
        assert!(error.starts_with("invalid metadata: holds a NUL character"), "{error}");
        let list = JobUpdate::new().metadata(serde_json::json!([1]));
        let error = client.update(id, &list).await.unwrap_err().to_string();
        assert_eq!(error, "invalid metadata: must be a JSON object, not [1]");
        let change = JobUpdate::new()
            .if_version(3)
            .payload(serde_json::json!({"fail": true}))
            .metadata(serde_json::json!({"retry_group": "g-1"}))
            .run_at(chrono::Utc::now());
        assert_eq!(client.update(id, &change).await.unwrap(), UpdateOutcome::Updated { version: 4 });
        let third = db.job(id).await;
        assert_eq!(
            (third.payload.as_deref(), third.retry_group().as_deref()),
            (Some(r#"{"fail":true}"#), Some("g-1"))
        );

        // Another writer's UPDATE moves `updated_at` too (PostgreSQL: a trigger; MariaDB:
        // the column's ON UPDATE).
        db.execute("UPDATE sk_tasks_queue_t SET task_priority = 9").await;
        let fourth = db.job(id).await;
        if tracked {
            assert!(fourth.updated_at > third.updated_at, "{:?} after {:?}", fourth.updated_at, third.updated_at);
        }

        // Run it: a job that has ended is not changed.
        let w = RunningWorker::start(worker(&db, &[Charge::TASK_TYPE]));
        let ended = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        assert_eq!(ended.version, None);
        if tracked {
            assert!(ended.updated_at >= fourth.updated_at);
        }
        assert_eq!(client.update(id, &JobUpdate::new().priority(1)).await.unwrap(), UpdateOutcome::NotWaiting);
        db.drop().await;
    }
}
