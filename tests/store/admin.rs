//! `Admin` and `Control`: each operation written once over the dialect (`store/queries.rs`)
//! run on every backend through `Client`, `QueueInfo`, `StoredSchedules` and
//! `sk_runtime::migrations`, its only callers, with a manual clock and leases taken
//! directly (`__driver`), so each figure is known exactly.

use chrono::{Duration as Span, Utc};
use sk_runtime::__driver::Driver;
use sk_runtime::{
    Client, Clock as _, CountBy, JobFilter, JobStatus, ManualClock, StoredSchedules, TenantHold,
};
use sk_tests::each_backend;

use super::super::Record;

const RECORD: &[&str] = &["record"];

each_backend! {
    /// Pausing changes a queue once (a queue without a row gets one), resuming once; a
    /// global limit is set, read and removed.
    async fn pauses_and_limits_change_a_queue_once(db) {
        let clock = ManualClock::new(Utc::now());
        let client = Client::new(db.pool.clone()).clock(clock.clone());
        assert!(client.pause("mail").await.unwrap(), "a queue with no row is paused");
        assert!(!client.pause("mail").await.unwrap(), "a paused queue stays as it is");
        let mail = |queues: Vec<sk_runtime::QueueState>| queues.into_iter().find(|q| q.name == "mail");
        let paused = mail(client.queues().await.unwrap()).expect("the paused queue is listed");
        assert_eq!(paused.paused_at, Some(clock.now()));
        clock.advance(std::time::Duration::from_secs(5));
        assert!(client.resume("mail").await.unwrap());
        assert!(!client.resume("mail").await.unwrap(), "a running queue stays as it is");
        assert!(client.pause("mail").await.unwrap(), "a resumed queue pauses again");
        assert_eq!(mail(client.queues().await.unwrap()).unwrap().paused_at, Some(clock.now()));

        client.set_global_limit("reports", Some(3)).await.unwrap();
        let reports = client.queues().await.unwrap().into_iter().find(|q| q.name == "reports");
        assert_eq!(reports.map(|q| (q.global_limit, q.paused_at)), Some((Some(3), None)));
        client.set_global_limit("reports", Some(5)).await.unwrap();
        client.set_global_limit("reports", None).await.unwrap();
        let reports = client.queues().await.unwrap().into_iter().find(|q| q.name == "reports");
        assert_eq!(reports.and_then(|q| q.global_limit), None);
        db.drop().await;
    }
}

each_backend! {
    /// The live counts (`QueueInfo::counts`, `Client::queues`, `count_by`) put each job in
    /// one state: due, scheduled, running, or leased past its lease; the ended ones by
    /// group; `peek` lists the unleased in claim order.
    async fn live_jobs_are_counted_in_one_state_each(db) {
        let now = Utc::now();
        let clock = ManualClock::new(now);
        let client = Client::new(db.pool.clone()).clock(clock.clone());
        let post = |label: &str, queue: &str, tenant: Option<&str>| {
            let job = Record::new(label.into()).with_queue(queue);
            match tenant {
                Some(t) => job.with_tenant(t),
                None => job,
            }
        };
        let due = post("due", "a", Some("acme")).with_priority(1).enqueue(&db.pool).await.unwrap();
        let running = post("running", "a", Some("acme")).enqueue(&db.pool).await.unwrap();
        let later = post("later", "a", None).run_at(now + Span::hours(1)).enqueue(&db.pool).await.unwrap();
        let other = post("other", "b", None).with_priority(2).enqueue(&db.pool).await.unwrap();
        let ended = post("ended", "b", Some("acme")).with_priority(3).enqueue(&db.pool).await.unwrap();
        let driver = Driver::new(db.pool.clone(), "w1");
        let at = clock.now() + Span::seconds(1);
        let claimed = driver.claim(RECORD, 2, at, at + Span::seconds(30)).await.unwrap();
        let mut taken: Vec<_> = claimed.iter().map(|c| c.id).collect();
        taken.sort();
        assert_eq!(taken, [due, running], "the two of priority 0 and 1");
        // `due` goes back (its attempt is not charged); `ended` fails for good.
        assert_eq!(driver.give_back(&[(due, 1)], at).await.unwrap(), 1);
        let failed = driver.claim_from(RECORD, &["a"], 1, at, at + Span::seconds(30)).await.unwrap();
        assert_eq!(failed.iter().map(|c| c.id).collect::<Vec<_>>(), [other]);
        assert_eq!(driver.fail(&[(other, 1)], None, "gone", at).await.unwrap(), [true]);
        let _ = ended;
        clock.set(at);

        let counts = client.counts().await.unwrap();
        assert_eq!(
            (counts.available, counts.scheduled, counts.running, counts.lease_expired, counts.pending),
            (2, 1, 1, 0, 0)
        );
        assert_eq!(counts.status(JobStatus::Fatal), 1);
        let queues = client.queues().await.unwrap();
        let a = queues.iter().find(|q| q.name == "a").expect("queue a");
        assert_eq!((a.available, a.scheduled, a.running, a.pending), (1, 1, 1, 0));
        let b = queues.iter().find(|q| q.name == "b").expect("queue b");
        assert_eq!((b.available, b.scheduled, b.running), (1, 0, 0));

        let by_tenant = client.count_by(CountBy::Tenant).await.unwrap();
        let acme = by_tenant.iter().find(|g| g.key.as_deref() == Some("acme")).expect("acme");
        assert_eq!((acme.available, acme.running, acme.fatal), (2, 1, 0));
        let none = by_tenant.iter().find(|g| g.key.is_none()).expect("no tenant");
        assert_eq!((none.scheduled, none.fatal), (1, 1));
        // Queue a's tenants (`tenant_states`): acme's due job and its running one, held by
        // a limit of one running job per tenant; a's job without a tenant is no tenant's.
        client.set_tenant_limit("a", Some(1)).await.unwrap();
        let tenants = client.tenants("a").await.unwrap();
        let shown: Vec<_> = tenants.iter().map(|t| (t.tenant.as_str(), t.available, t.running, t.held_by)).collect();
        assert_eq!(shown, [("acme", 1, 1, Some(TenantHold::RunningLimit))]);

        let peeked = client.peek(10).await.unwrap();
        assert_eq!(peeked.iter().map(|j| j.id).collect::<Vec<_>>(), [later, due, ended]);
        assert_eq!(peeked[0].queue, "a");

        clock.set(at + Span::seconds(31));
        let counts = client.counts().await.unwrap();
        assert_eq!((counts.running, counts.lease_expired), (0, 1), "a lease run out");
        db.drop().await;
    }
}

each_backend! {
    /// A bulk action takes exactly the jobs its filter names (`find_ids`), whatever
    /// filters are left out.
    async fn a_bulk_action_takes_the_jobs_its_filter_names(db) {
        let client = Client::new(db.pool.clone());
        for (queue, tenant) in [("a", "x"), ("a", "y"), ("a", "x"), ("b", "x")] {
            Record::new("j".into()).with_queue(queue).with_tenant(tenant).enqueue(&db.pool).await.unwrap();
        }
        let a_x = JobFilter::new().queue("a").tenant("x");
        assert_eq!(client.cancel_where(&a_x).await.unwrap(), 2);
        assert_eq!(client.cancel_where(&a_x).await.unwrap(), 0, "already cancelled");
        let cancelled = JobFilter::new().status(JobStatus::Cancelled);
        assert_eq!(client.retry_where(&cancelled.clone().tenant("y")).await.unwrap(), 0);
        assert_eq!(client.retry_where(&cancelled).await.unwrap(), 2);
        assert_eq!(client.cancel_where(&JobFilter::new()).await.unwrap(), 4, "no filter: all");
        db.drop().await;
    }
}

each_backend! {
    /// Failed jobs are grouped by error kind and message, most first, each group with
    /// its newest job as a sample and its first and last times.
    async fn errors_are_grouped_with_the_newest_job_as_sample(db) {
        let client = Client::new(db.pool.clone());
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(Record::new("e".into()).enqueue(&db.pool).await.unwrap());
        }
        let driver = Driver::new(db.pool.clone(), "w1");
        let at = Utc::now();
        driver.claim(RECORD, 3, at, at + Span::seconds(30)).await.unwrap();
        driver.fail(&[(ids[0], 1), (ids[2], 1)], None, "gateway down", at).await.unwrap();
        driver.fail(&[(ids[1], 1)], Some(at + Span::hours(1)), "slow", at + Span::seconds(1)).await.unwrap();
        let groups = client.error_groups(at - Span::minutes(1), 10).await.unwrap();
        let seen: Vec<_> = groups.iter().map(|g| (g.count, g.message.as_deref(), g.sample)).collect();
        assert_eq!(seen, [(2, Some("gateway down"), ids[2]), (1, Some("slow"), ids[1])]);
        assert!(groups.iter().all(|g| g.kind.as_deref() == Some("conformance")));
        assert!(client.error_groups(at + Span::minutes(1), 10).await.unwrap().is_empty(), "none since");
        db.drop().await;
    }
}

each_backend! {
    /// A stored schedule is added, replaced by name, listed by name, and removed once.
    async fn stored_schedules_are_put_replaced_listed_and_removed(db) {
        let schedules = StoredSchedules::new(db.pool.clone());
        schedules.add("nightly", "0 0 3 * * *", Record::new("n".into())).await.unwrap();
        schedules.add("hourly", "0 0 * * * *", Record::new("h".into())).await.unwrap();
        schedules.add("nightly", "0 30 3 * * *", Record::new("n2".into())).await.unwrap();
        let listed = schedules.list().await.unwrap();
        let rows: Vec<_> = listed.iter().map(|s| (s.name.as_str(), s.cron.as_str(), s.overlap)).collect();
        assert_eq!(rows, [("hourly", "0 0 * * * *", false), ("nightly", "0 30 3 * * *", false)]);
        assert_eq!(listed[1].payload, serde_json::json!({"label": "n2"}));
        assert!(schedules.remove("nightly").await.unwrap());
        assert!(!schedules.remove("nightly").await.unwrap());
        assert_eq!(schedules.list().await.unwrap().len(), 1);
        db.drop().await;
    }
}

each_backend! {
    /// Every migration of the build reads as applied to a migrated schema, and as not
    /// applied to one never migrated (no table at all).
    async fn migrations_read_as_applied_or_not(db) {
        let applied = sk_runtime::migrations(db.pool.clone(), &sk_runtime::Schema::default()).await.unwrap();
        assert!(!applied.is_empty() && applied.iter().all(|m| m.applied_at.is_some()), "{applied:?}");
        let fresh = sk_runtime::Schema::new("fresh", "sk_").unwrap();
        let none = sk_runtime::migrations(db.pool.clone(), &fresh).await.unwrap();
        assert_eq!(none.len(), applied.len());
        assert!(none.iter().all(|m| m.applied_at.is_none()), "{none:?}");
        db.drop().await;
    }
}
