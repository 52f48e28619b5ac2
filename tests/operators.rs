//! What an operator works an incident with, through `Client` on every backend: error
//! groups with what varies masked, the filter of a group's jobs, bulk actions by filter
//! (retry, run now, cancel, delete) and the audit trail they write; `sk errors` and
//! `sk audit`. A module of the `queue` test binary; the dashboard's side is in `web`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sk_runtime::{job, Client, CountBy, Data, Job, JobError, JobFilter, JobStatus};
use sk_tests::{each_backend, wait_until, RunningWorker};

use super::{worker, T};

/// Whether the downstream is down.
#[derive(Clone, Default)]
struct Outage(Arc<AtomicBool>);

/// Fails for good while the outage lasts: a message that names the order, or, for
/// orders over 900, another error.
#[job(queue = "orders", max_attempts = 1)]
async fn ship_order(order: u64, outage: Data<Outage>) -> Result<(), JobError> {
    if !outage.0.load(Ordering::SeqCst) {
        return Ok(());
    }
    if order > 900 {
        return Err(JobError::fatal(format!(
            "address of order {order} is 'unknown'"
        )));
    }
    Err(JobError::fatal(format!(
        "carrier 3f2a9c1e-7b4d-4e8f-9a0b-1c2d3e4f5a6b refused order {order} (ops+{order}@example.com)"
    )))
}

each_backend! {
    /// 40 jobs fail with messages that differ by their order number, an e-mail address
    /// and a UUID, and 3 with another error: two groups, with their counts, queues and
    /// hours. A group's filter lists and retries exactly its jobs, set-based; delete and
    /// run now take the filter's jobs in their states; every action is in the audit trail
    /// with its actor, filter and count, and `sk errors` and `sk audit` say the same.
    async fn errors_group_by_mask_and_bulk_actions_are_audited(db) {
        let client = Client::new(db.pool.clone()).actor("tester");
        let outage = Outage::default();
        outage.0.store(true, Ordering::SeqCst);
        let w = RunningWorker::start(worker(&db, &[ShipOrder::TASK_TYPE]).data(outage.clone()));
        ShipOrder::enqueue_many(&db.pool, (100..140).chain(901..904).map(ShipOrder::new))
            .await
            .unwrap();
        wait_until("43 jobs failed for good", T * 2, || async {
            let counts = client.count_by(CountBy::Queue).await.ok()?;
            (counts.iter().map(|c| c.fatal).sum::<i64>() == 43).then_some(())
        })
        .await;

        let groups = client
            .error_groups(Utc::now() - chrono::Duration::hours(1), 10)
            .await
            .unwrap();
        let seen: Vec<(i64, &str)> = groups.iter().map(|g| (g.count, g.pattern.as_str())).collect();
        assert_eq!(
            seen,
            [
                (40, "carrier {uuid} refused order {n} ({email})"),
                (3, "address of order {n} is '{q}'"),
            ]
        );
        let carrier = &groups[0];
        assert_eq!(carrier.task_type, ShipOrder::TASK_TYPE);
        assert_eq!(carrier.queues, ["orders"]);
        assert_eq!(carrier.hourly.iter().map(|(_, n)| n).sum::<i64>(), 40);
        assert_eq!(carrier.fingerprint.len(), 16);
        assert!(carrier.message.as_deref().is_some_and(|m| m.starts_with("carrier 3f2a9c1e")));
        // `sk errors` groups alike.
        let (code, out, err) = crate::cli::sk(&db.url, &["errors", "--since", "1h"]).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&carrier.fingerprint) && out.contains("{uuid} refused order {n}"), "{out}");

        // The group's filter takes its 40 jobs, not the other 3.
        let of_group = JobFilter::new().error_group(carrier);
        let page = client.jobs(&of_group, None, 100).await.unwrap();
        assert_eq!(page.jobs.len(), 40);
        assert_eq!(client.count_where(&of_group, 1_000).await.unwrap(), 40);
        assert_eq!(client.count_where(&of_group, 10).await.unwrap(), 10);
        // Pages of a filter on an error keep their size.
        let first = client.jobs(&of_group, None, 15).await.unwrap();
        let second = client.jobs(&of_group, first.next, 15).await.unwrap();
        assert_eq!((first.jobs.len(), second.jobs.len()), (15, 15));
        assert!(first.jobs.iter().all(|j| !second.jobs.iter().any(|k| k.id == j.id)));

        // Retry the group while the queue is paused: 40 due, none retrying.
        client.pause("orders").await.unwrap();
        outage.0.store(false, Ordering::SeqCst);
        assert_eq!(client.retry_where(&of_group).await.unwrap(), 40);
        let orders = client.count_by(CountBy::Queue).await.unwrap();
        let orders = orders.iter().find(|c| c.key.as_deref() == Some("orders")).unwrap();
        assert_eq!((orders.available, orders.retrying, orders.fatal), (40, 0, 3));
        let queue = client.queues().await.unwrap();
        let queue = queue.iter().find(|q| q.name == "orders").unwrap();
        assert_eq!(queue.available, orders.available, "one meaning of available");
        // Delete takes ended jobs only: the 3 others, not the 40 waiting.
        let all_orders = JobFilter::new().queue("orders");
        assert_eq!(client.delete_where(&all_orders).await.unwrap(), 3);
        // Run now makes waiting jobs due: none is waiting for its time here.
        let later = ShipOrder::new(7)
            .run_after(Duration::from_secs(3600))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let waiting = JobFilter::new().queue("orders").status(JobStatus::Unprocessed);
        assert_eq!(client.run_now_where(&waiting).await.unwrap(), 41);
        assert_eq!(db.job(later).await.status(), JobStatus::Unprocessed);
        client.resume("orders").await.unwrap();
        wait_until("the 41 ran", T * 2, || async {
            let done = JobFilter::new().queue("orders").status(JobStatus::Processed);
            (client.count_where(&done, 100).await.ok()? == 41).then_some(())
        })
        .await;
        w.stop().await;
        // Cancel takes the live jobs; there are none left.
        assert_eq!(client.cancel_where(&all_orders).await.unwrap(), 0);

        let audit = client.audit(None, 20).await.unwrap();
        type Entry<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, Option<i64>);
        let trail: Vec<Entry<'_>> = audit
            .iter()
            .map(|e| (e.actor.as_str(), e.action.as_str(), e.target.as_deref(), e.filter.as_deref(), e.jobs))
            .collect();
        let group_filter = format!(
            "type={} error-kind=error error=\"carrier {{uuid}} refused order {{n}} ({{email}})\"",
            ShipOrder::TASK_TYPE
        );
        assert_eq!(
            trail,
            [
                ("tester", "cancel", None, Some("queue=orders"), Some(0)),
                ("tester", "resume", Some("orders"), None, None),
                ("tester", "run-now", None, Some("queue=orders status=unprocessed"), Some(41)),
                ("tester", "delete", None, Some("queue=orders"), Some(3)),
                ("tester", "retry", None, Some(group_filter.as_str()), Some(40)),
                ("tester", "pause", Some("orders"), None, None),
            ]
        );
        assert!(audit.windows(2).all(|w| w[0].id > w[1].id && w[0].at >= w[1].at));
        let older = client.audit(Some(audit[1].id), 20).await.unwrap();
        assert_eq!(older.first().map(|e| e.id), Some(audit[2].id));
        assert!(client.audit(None, 0).await.is_err());
        // An update of a waiting job is an action too.
        let held = ShipOrder::new(8).run_after(Duration::from_secs(3600)).enqueue(&db.pool).await.unwrap();
        client.update(held, &sk_runtime::JobUpdate::new().priority(3)).await.unwrap();
        let newest = &client.audit(None, 1).await.unwrap()[0];
        let held = held.to_string();
        assert_eq!((newest.action.as_str(), newest.target.as_deref(), newest.jobs), ("update", Some(held.as_str()), Some(1)));

        // The CLI reads the same.
        let (code, out, err) = crate::cli::sk(&db.url, &["audit", "--limit", "4"]).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("update") && out.contains("run-now") && out.contains("queue=orders status=unprocessed"), "{out}");
        assert!(!out.contains("pause"), "{out}");
        db.drop().await;
    }
}
