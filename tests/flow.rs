//! Flow control on every backend: a queue's rate limit shared by several workers, read
//! from the record of starts, a handler's "too many requests" holding its queue, and a
//! fair queue's claims shared across tenants and a limit of running jobs per tenant.
//! A module of the `queue` test binary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sk_runtime::{
    job, Client, Data, Enqueue, Error, Job, JobError, JobStatus, RateLimit, TenantHold,
};
use sk_tests::{each_backend, wait_until, Db, RunningWorker, TestBackend};

use super::{worker, T};

fn client<B: TestBackend>(db: &Db<B>) -> Client
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    Client::new(db.pool.clone())
}

/// When each handler of a job of `metered` started, by the system clock.
#[derive(Clone, Default)]
struct HandlerStarts(Arc<Mutex<Vec<DateTime<Utc>>>>);

/// A no-op in a rate-limited queue that notes its handler's start (what a downstream
/// API that allows so many calls a second sees).
#[job(queue = "metered")]
async fn metered(_n: u32, starts: Data<HandlerStarts>) -> Result<(), JobError> {
    starts.0.lock().unwrap().push(Utc::now());
    Ok(())
}

/// When the downstream first said "too many requests".
type Refused = Arc<Mutex<Option<DateTime<Utc>>>>;

/// Job 0's first run hears "429, retry after 2 s"; every other run succeeds.
#[job(queue = "partner")]
async fn partner(n: u32, refused: Data<Refused>) -> Result<(), JobError> {
    let mut refused = refused.lock().unwrap();
    if n == 0 && refused.is_none() {
        *refused = Some(Utc::now());
        return Err(JobError::rate_limited(Duration::from_secs(2)));
    }
    Ok(())
}

/// A no-op in a queue beside `partner`.
#[job(queue = "beside")]
async fn beside(_n: u32) -> Result<(), JobError> {
    Ok(())
}

each_backend! {
    async fn a_rate_limited_handler_holds_its_queue_and_not_the_others(db) {
        let client = client(&db);
        for queue in ["partner", "beside"] {
            client.set_rate_limit(queue, Some("100/1s".parse().unwrap())).await.unwrap();
        }
        let refused = Refused::default();
        let w = RunningWorker::start(
            worker(&db, &[Partner::TASK_TYPE, Beside::TASK_TYPE])
                .concurrency(4)
                .data(Arc::clone(&refused)),
        );
        let first = Partner::new(0).enqueue(&db.pool).await.unwrap();
        let at = wait_until("the 429", T, || {
            let seen = *refused.lock().unwrap();
            async move { seen }
        })
        .await;
        let hold_ends = at + chrono::Duration::seconds(2);
        // The queue shows the hold.
        let opens = wait_until("the hold", T, || async {
            let queues = client.queues().await.unwrap();
            queues
                .into_iter()
                .find(|q| q.name == "partner")
                .and_then(|q| q.rate_limit)
                .and_then(|r| r.opens_at)
        })
        .await;
        assert!(opens >= hold_ends, "{opens} < {hold_ends}");
        let held = Partner::enqueue_many(&db.pool, (1..6).map(Partner::new).collect::<Vec<_>>())
            .await
            .unwrap();
        let free = Beside::enqueue_many(&db.pool, (0..5).map(Beside::new).collect::<Vec<_>>())
            .await
            .unwrap();
        let started = |id| {
            let client = &client;
            async move {
                let record = client.wait(id, T).await.unwrap();
                assert_eq!(record.status(), JobStatus::Processed);
                let attempts = record.attempts();
                assert_eq!(attempts.len(), 1, "{id}: {attempts:?}");
                assert_eq!(record.error_count, 0);
                attempts[0].started_at.unwrap()
            }
        };
        for id in free {
            let at = started(id).await;
            assert!(at < hold_ends, "the other queue ran on: {at} < {hold_ends}");
        }
        for id in held.into_iter().chain([first]) {
            let at = started(id).await;
            assert!(at >= hold_ends, "the held queue waited: {at} >= {hold_ends}");
        }
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn a_rate_limit_holds_in_every_window_across_three_workers(db) {
        let client = client(&db);
        for bad in ["0/1s", "50", "50/0s", "50/fortnight"] {
            assert!(
                matches!(bad.parse::<RateLimit>(), Err(Error::Invalid { what: "rate limit", .. })),
                "{bad}"
            );
        }
        let limit: RateLimit = "50/1s".parse().unwrap();
        client.set_rate_limit("metered", Some(limit)).await.unwrap();
        let queue = client.queues().await.unwrap();
        let rate = queue.iter().find(|q| q.name == "metered").unwrap().rate_limit.clone().unwrap();
        assert_eq!((rate.limit, rate.started, rate.opens_at), (limit, 0, None));

        // A backlog of 4 windows' worth, then three workers that could each run it all
        // at once.
        let ids = Metered::enqueue_many(&db.pool, (0..200).map(Metered::new).collect::<Vec<_>>())
            .await
            .unwrap();
        let handlers = HandlerStarts::default();
        let workers: Vec<RunningWorker> = (0..3)
            .map(|_| {
                RunningWorker::start(
                    worker(&db, &[Metered::TASK_TYPE]).concurrency(64).data(handlers.clone()),
                )
            })
            .collect();
        for id in &ids {
            client.wait(*id, T).await.unwrap();
        }
        for w in workers {
            w.stop().await;
        }

        let mut starts: Vec<DateTime<Utc>> = Vec::with_capacity(ids.len());
        for id in &ids {
            let record = client.job(*id).await.unwrap().unwrap();
            assert_eq!(record.status(), JobStatus::Processed);
            // Held back, a job kept its attempts: it ran once, as attempt 1.
            let attempts = record.attempts();
            assert_eq!(attempts.len(), 1, "{id}: {attempts:?}");
            assert_eq!(attempts[0].attempt, 1);
            starts.push(attempts[0].started_at.unwrap());
        }
        starts.sort();
        let second = chrono::Duration::seconds(1);
        for (i, from) in starts.iter().enumerate() {
            let within = starts[i..].iter().take_while(|t| **t < *from + second).count();
            assert!(within <= 50, "{within} claims in the second from {from}");
        }
        // And on the handlers' own starts, as a downstream sees them: before, they began
        // 10-80 ms after their claims, and up to 65 fell in one sliding second.
        let mut handled = handlers.0.lock().unwrap().clone();
        handled.sort();
        assert_eq!(handled.len(), ids.len(), "each handler ran once");
        for (i, from) in handled.iter().enumerate() {
            let within = handled[i..].iter().take_while(|t| **t < *from + second).count();
            assert!(within <= 50, "{within} handler starts in the second from {from}");
        }
        // It drains at the limit, not below it: 4 windows of 50 take 3 s from the first
        // start to the last, and a claim held back wakes when its window opens (the
        // bound leaves half a second a window to a loaded machine).
        let span = (*starts.last().unwrap() - starts[0]).to_std().unwrap();
        assert!(span >= Duration::from_secs(3), "{span:?}");
        assert!(span < Duration::from_millis(4_500), "drained below the limit: {span:?}");

        let queue = client.queues().await.unwrap();
        let rate = queue.iter().find(|q| q.name == "metered").unwrap().rate_limit.clone().unwrap();
        assert!(rate.started <= 50);

        // Lifted, the limit is gone from the queue's state.
        client.set_rate_limit("metered", None).await.unwrap();
        let queue = client.queues().await.unwrap();
        assert!(queue.iter().all(|q| q.rate_limit.is_none()));
        db.drop().await;
    }
}

/// A no-op job type limited to 20 starts a second over every worker.
#[job(queue = "typed", rate = "20/1s")]
async fn typed_rated(_n: u32) -> Result<(), JobError> {
    Ok(())
}

/// A no-op in the same queue, without a limit.
#[job(queue = "typed")]
async fn typed_free(_n: u32) -> Result<(), JobError> {
    Ok(())
}

each_backend! {
    async fn a_job_types_rate_holds_across_workers_and_not_its_queues_other_jobs(db) {
        let client = client(&db);
        let rated = TypedRated::enqueue_many(&db.pool, (0..60).map(TypedRated::new).collect::<Vec<_>>())
            .await
            .unwrap();
        let free = TypedFree::enqueue_many(&db.pool, (0..40).map(TypedFree::new).collect::<Vec<_>>())
            .await
            .unwrap();
        let workers: Vec<RunningWorker> = (0..2)
            .map(|_| {
                RunningWorker::start(
                    worker(&db, &[TypedRated::TASK_TYPE, TypedFree::TASK_TYPE]).concurrency(32),
                )
            })
            .collect();
        let starts = |ids: Vec<uuid::Uuid>| {
            let client = &client;
            async move {
                let mut starts = Vec::new();
                for id in ids {
                    let record = client.wait(id, T).await.unwrap();
                    assert_eq!(record.status(), JobStatus::Processed);
                    assert_eq!(record.attempts().len(), 1);
                    starts.push(record.attempts()[0].started_at.unwrap());
                }
                starts.sort();
                starts
            }
        };
        let rated = starts(rated).await;
        let free = starts(free).await;
        let limits = client.task_type_rate_limits().await.unwrap();
        let (_, limit) = limits.iter().find(|(t, _)| t == TypedRated::TASK_TYPE).unwrap();
        assert_eq!((limit.limit.count, limit.limit.window), (20, Duration::from_secs(1)));
        for w in workers {
            w.stop().await;
        }
        let second = chrono::Duration::seconds(1);
        for (i, from) in rated.iter().enumerate() {
            let within = rated[i..].iter().take_while(|t| **t < *from + second).count();
            assert!(within <= 20, "{within} starts of the rated type in the second from {from}");
        }
        let span = (*rated.last().unwrap() - rated[0]).to_std().unwrap();
        assert!(span >= Duration::from_secs(2), "3 windows of 20: {span:?}");
        // The queue's other jobs did not wait for the rated ones.
        assert!(
            *free.last().unwrap() < rated[0] + second,
            "the unlimited jobs ran at once: last {} vs first rated {}",
            free.last().unwrap(),
            rated[0]
        );
        db.drop().await;
    }
}

/// The order in which the jobs of a fair queue started: (tenant, job number).
type Started = Arc<Mutex<Vec<(String, u32)>>>;

/// A short job of one tenant in a queue claimed fairly.
#[job(queue = "shared")]
async fn tenant_job(tenant: String, n: u32, started: Data<Started>) -> Result<(), JobError> {
    started.lock().unwrap().push((tenant, n));
    tokio::time::sleep(Duration::from_millis(2)).await;
    Ok(())
}

each_backend! {
    async fn a_fair_queue_serves_small_tenants_beside_a_flood(db) {
        let job = |tenant: &str, n: u32| {
            let job = Enqueue::new(TenantJob::new(tenant.into(), n));
            if tenant.is_empty() { job } else { job.with_tenant(tenant) }
        };
        // Tenant a's flood first, then b's and c's few (b's last with the first
        // priority), and a few without a tenant.
        TenantJob::enqueue_many(&db.pool, (0..600).map(|n| job("a", n))).await.unwrap();
        let few = (0..10).map(|n| job("b", n).with_priority(if n == 9 { -1 } else { 0 }));
        TenantJob::enqueue_many(&db.pool, few.chain((0..10).map(|n| job("c", n))))
            .await
            .unwrap();
        let ids = TenantJob::enqueue_many(&db.pool, (0..5).map(|n| job("", n))).await.unwrap();
        assert!(matches!(
            worker(&db, &[TenantJob::TASK_TYPE]).queues(["other"]).fair("shared").build(),
            Err(Error::Invalid { what: "fair queue", .. })
        ));

        // Fair claims are the queue's stored control: this worker is told nothing.
        let admin = client(&db);
        assert!(admin.set_fair("shared", true).await.unwrap());
        assert!(!admin.set_fair("shared", true).await.unwrap(), "already fair");
        assert!(matches!(
            admin.set_fair("", true).await,
            Err(Error::Invalid { what: "queue name", .. })
        ));
        let started = Started::default();
        let w = RunningWorker::start(
            worker(&db, &[TenantJob::TASK_TYPE]).concurrency(4).data(Arc::clone(&started)),
        );
        wait_until("every job to start", T, || {
            let n = started.lock().unwrap().len();
            async move { (n == 625).then_some(()) }
        })
        .await;
        for id in ids {
            client(&db).wait(id, T).await.unwrap();
        }
        w.stop().await;

        let started = started.lock().unwrap().clone();
        let position = |tenant: &str| -> Vec<usize> {
            started.iter().enumerate().filter(|(_, (t, _))| t == tenant).map(|(i, _)| i).collect()
        };
        // b and c, with 10 jobs each behind a's 600, took turns with a from the first
        // claims: each claim of 4 gives each tenant one, so their 20 jobs started among
        // the first 40 or so of 625 (in the queue's order, they would be 601st to 620th).
        for tenant in ["b", "c"] {
            let at = position(tenant);
            assert_eq!(at.len(), 10, "{tenant}");
            assert!(*at.last().unwrap() < 60, "{tenant}'s jobs started at {at:?}");
        }
        // Within a tenant, priority first, then the order of posting.
        let b: Vec<u32> = started.iter().filter(|(t, _)| t == "b").map(|(_, n)| *n).collect();
        assert_eq!(b[0], 9, "{b:?}");
        let a: Vec<u32> = started.iter().filter(|(t, _)| t == "a").map(|(_, n)| *n).collect();
        // (Four at a time: within a claim, which starts first is the runtime's choice.)
        let out_of_order = a.iter().enumerate().filter(|(i, n)| i.abs_diff(**n as usize) >= 8);
        assert_eq!(out_of_order.count(), 0, "a in its order: {a:?}");
        assert_eq!(position("").len(), 5, "the jobs without a tenant ran too");

        // Shown, and turned off.
        let fair_since = |queues: Vec<sk_runtime::QueueState>| {
            queues.into_iter().find(|q| q.name == "shared").and_then(|q| q.fair_since)
        };
        assert!(fair_since(admin.queues().await.unwrap()).is_some());
        assert!(admin.set_fair("shared", false).await.unwrap());
        assert!(!admin.set_fair("shared", false).await.unwrap(), "already off");
        assert_eq!(fair_since(admin.queues().await.unwrap()), None);
        // A worker built with `fair` turns it on for every worker as it starts.
        let w = RunningWorker::start(
            worker(&db, &[TenantJob::TASK_TYPE]).fair("shared").data(Started::default()),
        );
        wait_until("the worker to make the queue fair", T, || {
            let admin = admin.clone();
            async move { fair_since(admin.queues().await.unwrap()).map(|_| ()) }
        })
        .await;
        w.stop().await;
        db.drop().await;
    }
}

/// The calls of a queue limited per tenant: each tenant's running calls and the most at
/// once, and the order in which they started.
#[derive(Default)]
struct Calls {
    running: std::collections::HashMap<String, (u32, u32)>,
    started: Vec<String>,
}

/// A downstream call on behalf of `tenant`, its tenant (none for `None`), in a queue
/// limited per tenant.
#[job(queue = "per_tenant", tenant = tenant)]
async fn tenant_call(
    tenant: Option<String>,
    calls: Data<Arc<Mutex<Calls>>>,
) -> Result<(), JobError> {
    let tenant = tenant.unwrap_or_default();
    {
        let mut calls = calls.lock().unwrap();
        calls.started.push(tenant.clone());
        let (now, most) = calls.running.entry(tenant.clone()).or_default();
        *now += 1;
        *most = (*most).max(*now);
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    calls.lock().unwrap().running.get_mut(&tenant).unwrap().0 -= 1;
    Ok(())
}

each_backend! {
    async fn a_limit_per_tenant_holds_across_workers_and_holds_back_no_one_else(db) {
        let client = client(&db);
        assert!(matches!(
            client.set_tenant_limit("per_tenant", Some(0)).await,
            Err(Error::Invalid { what: "tenant limit", .. })
        ));
        client.set_tenant_limit("per_tenant", Some(2)).await.unwrap();
        let state = client.queues().await.unwrap();
        let limited = state.iter().find(|q| q.name == "per_tenant").unwrap();
        assert_eq!((limited.tenant_limit, limited.global_limit), (Some(2), None));

        // Each job's tenant is its argument (`tenant = tenant`).
        let job = |tenant: &str| {
            Enqueue::new(TenantCall::new((!tenant.is_empty()).then(|| tenant.to_owned())))
        };
        // Two floods, then a tenant with a few, then jobs without a tenant.
        let floods = (0..30).flat_map(|_| [job("a"), job("b")]);
        let few = (0..3).map(|_| job("c"));
        let untenanted = (0..6).map(|_| job(""));
        let mut ids = TenantCall::enqueue_many(&db.pool, floods.chain(few).chain(untenanted))
            .await
            .unwrap();
        assert_eq!(db.job(ids[0]).await.tenant.as_deref(), Some("a"));
        assert_eq!(db.job(ids[ids.len() - 1]).await.tenant, None);
        // `with_tenant` says otherwise; an argument that gives an empty tenant is refused.
        let later = chrono::Duration::hours(1);
        let moved = job("a").with_tenant("z").run_at(Utc::now() + later);
        let moved = moved.enqueue(&db.pool).await.unwrap();
        assert_eq!(db.job(moved).await.tenant.as_deref(), Some("z"));
        assert!(matches!(
            job("").with_tenant("").enqueue(&db.pool).await,
            Err(Error::Invalid { what: "tenant", .. })
        ));
        assert!(matches!(
            TenantCall::new(Some(String::new())).enqueue(&db.pool).await,
            Err(Error::Invalid { what: "tenant", .. })
        ));
        // Before any worker: each tenant's jobs, by name, none running or held; the jobs
        // without a tenant are no tenant's.
        let tenants = client.tenants("per_tenant").await.unwrap();
        let shown: Vec<(&str, i64, i64, Option<TenantHold>)> = tenants
            .iter()
            .map(|t| (t.tenant.as_str(), t.available, t.running, t.held_by))
            .collect();
        // (z's one job waits for its time.)
        let z = ("z", 0, 0, None);
        assert_eq!(shown, [("a", 30, 0, None), ("b", 30, 0, None), ("c", 3, 0, None), z]);
        // Enqueued by name, the job's tenant is its argument too.
        let named = client.enqueue_json("tenant_call", serde_json::json!({ "tenant": "c" }));
        let named = named.await.unwrap();
        assert_eq!(db.job(named).await.tenant.as_deref(), Some("c"));
        ids.push(named);
        assert!(matches!(
            client.enqueue_json("tenant_call", serde_json::json!({ "tenant": "" })).await,
            Err(Error::Invalid { what: "tenant", .. })
        ));

        let calls = Arc::new(Mutex::new(Calls::default()));
        let start = || {
            RunningWorker::start(
                worker(&db, &[TenantCall::TASK_TYPE]).concurrency(4).data(Arc::clone(&calls)),
            )
        };
        let (one, two) = (start(), start());
        for id in ids {
            client.wait(id, T).await.unwrap();
        }
        one.stop().await;
        two.stop().await;

        {
            let calls = calls.lock().unwrap();
            // Eight handler slots over two workers, and never more than two of a tenant's
            // jobs at once (the floods' at the limit, not below it); the jobs without a
            // tenant are not limited.
            for tenant in ["a", "b"] {
                assert_eq!(calls.running[tenant].1, 2, "the most of {tenant}'s jobs at once");
            }
            assert!(calls.running["c"].1 <= 2, "c's: {:?}", calls.running["c"]);
            assert_eq!(calls.started.iter().filter(|t| t.is_empty()).count(), 6);
            // c's few jobs took turns with the floods: all started among the first claims,
            // not after a's and b's 60.
            let c: Vec<usize> = (0..calls.started.len()).filter(|i| calls.started[*i] == "c").collect();
            assert!(c.len() == 4 && c[2] < 20, "c's jobs started at {c:?}");
        }

        // The claims passed over the floods at their limit, and the workers counted it.
        let held = "SELECT count(*) FROM sk_metrics_t
            WHERE metric_id = 'tenants_held_by_limit' AND metric_value > 0";
        assert!(db.scalar(held, None).await.unwrap_or(0) >= 1, "tenants_held_by_limit");

        client.set_tenant_limit("per_tenant", None).await.unwrap();
        let state = client.queues().await.unwrap();
        assert_eq!(state.iter().find(|q| q.name == "per_tenant").and_then(|q| q.tenant_limit), None);
        db.drop().await;
    }
}

/// A call to a downstream that gives each account (the job's tenant) its own quota; job
/// 0 of tenant "a" first hears "429, retry after 2 s" when `refused` says so.
#[job(queue = "per_account")]
async fn account_call(n: u32, refused: Data<Refused>) -> Result<(), JobError> {
    let mut refused = refused.lock().unwrap();
    if n == 0 && refused.is_none() {
        *refused = Some(Utc::now());
        return Err(JobError::rate_limited(Duration::from_secs(2)));
    }
    Ok(())
}

/// Each job's tenant and first start, from the record.
async fn starts_by_tenant(client: &Client, ids: &[uuid::Uuid]) -> Vec<(String, DateTime<Utc>)> {
    let mut starts = Vec::new();
    for id in ids {
        let record = client.job(*id).await.unwrap().unwrap();
        assert_eq!(record.status(), JobStatus::Processed);
        let attempts = record.attempts();
        starts.push((
            record.tenant.clone().unwrap_or_default(),
            attempts[0].started_at.unwrap(),
        ));
    }
    starts.sort_by_key(|s| s.1);
    starts
}

each_backend! {
    async fn a_rate_limit_per_tenant_holds_each_tenant_in_every_window(db) {
        let client = client(&db);
        let limit: RateLimit = "10/1s".parse().unwrap();
        client.set_tenant_rate_limit("per_account", Some(limit)).await.unwrap();
        let state = client.queues().await.unwrap();
        let queue = state.iter().find(|q| q.name == "per_account").unwrap();
        assert_eq!((queue.tenant_rate_limit, queue.rate_limit.is_none()), (Some(limit), true));

        // 3 windows' worth of a's and b's, a few of c's, and jobs without a tenant; the
        // handler is never refused (`refused` set).
        let job = |tenant: &str, n: u32| {
            let job = Enqueue::new(AccountCall::new(n));
            if tenant.is_empty() { job } else { job.with_tenant(tenant) }
        };
        let jobs = (1..=25)
            .flat_map(|n| [job("a", n), job("b", n)])
            .chain((1..=4).map(|n| job("c", n)))
            .chain((1..=5).map(|n| job("", n)));
        let ids = AccountCall::enqueue_many(&db.pool, jobs).await.unwrap();
        let refused = Refused::new(Mutex::new(Some(Utc::now())));
        let workers: Vec<RunningWorker> = (0..3)
            .map(|_| {
                RunningWorker::start(
                    worker(&db, &[AccountCall::TASK_TYPE]).concurrency(8).data(Arc::clone(&refused)),
                )
            })
            .collect();
        for id in &ids {
            client.wait(*id, T).await.unwrap();
        }
        for w in workers {
            w.stop().await;
        }

        let starts = starts_by_tenant(&client, &ids).await;
        let first = starts[0].1;
        let second = chrono::Duration::seconds(1);
        for tenant in ["a", "b", "c"] {
            let mine: Vec<DateTime<Utc>> =
                starts.iter().filter(|s| s.0 == tenant).map(|s| s.1).collect();
            for (i, from) in mine.iter().enumerate() {
                let within = mine[i..].iter().take_while(|t| **t < *from + second).count();
                assert!(within <= 10, "{tenant}: {within} starts in the second from {from}");
            }
        }
        // Each tenant drains at its own limit, beside the others: a's and b's 25 take 2 s
        // from the first start to their last (not 5 s, one after the other), and c's few
        // start in the first second.
        for tenant in ["a", "b"] {
            let last = starts.iter().filter(|s| s.0 == tenant).map(|s| s.1).max().unwrap();
            let span = (last - first).to_std().unwrap();
            assert!(span >= Duration::from_secs(2), "{tenant}: {span:?}");
            assert!(span < Duration::from_millis(3_500), "{tenant} drained below its limit: {span:?}");
        }
        let c_last = starts.iter().filter(|s| s.0 == "c").map(|s| s.1).max().unwrap();
        assert!(c_last - first < second, "c waited for the others: {:?}", c_last - first);

        client.set_tenant_rate_limit("per_account", None).await.unwrap();
        let state = client.queues().await.unwrap();
        assert!(state.iter().all(|q| q.tenant_rate_limit.is_none()));
        db.drop().await;
    }
}

each_backend! {
    async fn a_rate_limited_handler_holds_its_tenant_and_not_the_others(db) {
        let client = client(&db);
        let limit = "100/1s".parse().unwrap();
        client.set_tenant_rate_limit("per_account", Some(limit)).await.unwrap();
        let refused = Refused::default();
        let w = RunningWorker::start(
            worker(&db, &[AccountCall::TASK_TYPE]).concurrency(4).data(Arc::clone(&refused)),
        );
        // a's job 0 hears "429, retry after 2 s"; its tenant's limit is held until then.
        let zero = Enqueue::new(AccountCall::new(0)).with_tenant("a").enqueue(&db.pool).await.unwrap();
        let held = "SELECT count(*) FROM sk_tenant_starts_t WHERE starts_held_until_ts IS NOT NULL";
        wait_until("a's hold", T, || async { (db.scalar(held, None).await == Some(1)).then_some(()) })
            .await;
        let at = refused.lock().unwrap().expect("job 0 was refused");
        let hold = chrono::Duration::seconds(2);
        let job = |tenant: &str, n: u32| Enqueue::new(AccountCall::new(n)).with_tenant(tenant);
        let jobs = (1..=5).flat_map(|n| [job("a", n), job("b", n)]);
        let ids = AccountCall::enqueue_many(&db.pool, jobs).await.unwrap();
        // In its hold, a is shown held by its rate until the hold ends, its jobs waiting
        // (`Client::tenants`, `sk tenants --held`); b is not held.
        let a = client.tenants("per_account").await.unwrap().into_iter().find(|t| t.tenant == "a");
        let a = a.expect("a is one of the queue's tenants");
        assert_eq!(a.held_by, Some(TenantHold::RateLimit), "{a:?}");
        let opens = a.rate.as_ref().and_then(|r| r.opens_at).expect("when a's hold ends");
        assert!(opens >= at + hold, "a opens at {opens}, in its hold from {at}");
        let held = crate::cli::sk_json(&db.url, &["tenants", "per_account", "--held"]).await;
        assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
        assert_eq!((held[0]["tenant"].as_str(), held[0]["held_by"].as_str()), (Some("a"), Some("rate_limit")));
        for id in ids.iter().chain([&zero]) {
            client.wait(*id, T).await.unwrap();
        }
        w.stop().await;

        let starts = starts_by_tenant(&client, &ids).await;
        for (tenant, start) in &starts {
            match tenant.as_str() {
                "a" => assert!(*start >= at + hold, "a's job started at {start}, in its hold from {at}"),
                _ => assert!(*start < at + hold / 2, "b's job waited for a's hold: {start}, from {at}"),
            }
        }
        // Job 0 ran again after the hold, and kept its attempts (a snooze uses none).
        let zero = client.job(zero).await.unwrap().unwrap();
        assert_eq!(zero.status(), JobStatus::Processed);
        assert!(zero.attempts().last().unwrap().started_at.unwrap() >= at + hold);

        // Maintenance deletes the logs last written before its cutoff (here, all of
        // them) but keeps one whose hold has not ended: a's, while in its hold.
        let driver = sk_runtime::__driver::Driver::new(db.pool.clone(), "upkeep");
        let logs = "SELECT count(*) FROM sk_tenant_starts_t";
        assert_eq!(db.scalar(logs, None).await, Some(2), "a's and b's");
        let cutoff = Utc::now() + chrono::Duration::hours(1);
        assert_eq!(driver.prune_tenant_logs(cutoff, at + hold / 2).await.unwrap(), 1);
        let kept = "SELECT count(*) FROM sk_tenant_starts_t WHERE starts_tenant = 'a'";
        assert_eq!(db.scalar(kept, None).await, Some(1), "a's log, in its hold");
        assert_eq!(driver.prune_tenant_logs(cutoff, at + hold * 2).await.unwrap(), 1);
        assert_eq!(db.scalar(logs, None).await, Some(0));
        db.drop().await;
    }
}

each_backend! {
    /// Many operators reading at once (a queue's tenants, and every other read of the
    /// dashboard's overview): each read's statements stay on one server connection
    /// (behind PgBouncer in transaction mode, a statement parsed outside a transaction
    /// could be executed on another server connection and not be found there).
    async fn reads_at_once_each_answer(db) {
        let client = client(&db);
        client.set_tenant_rate_limit("per_account", Some("100/1s".parse().unwrap())).await.unwrap();
        let jobs = (0..6).map(|n| Enqueue::new(AccountCall::new(n)).with_tenant(format!("t{}", n % 3)));
        AccountCall::enqueue_many(&db.pool, jobs).await.unwrap();
        let mut reads = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let client = client.clone();
            reads.spawn(async move {
                let day = Utc::now() - chrono::Duration::hours(24);
                client.counts().await.unwrap();
                client.count_by(sk_runtime::CountBy::Tenant).await.unwrap();
                client.queues().await.unwrap();
                client.workers().await.unwrap();
                client.jobs(&sk_runtime::JobFilter::new(), None, 10).await.unwrap();
                client.error_groups(day, 10).await.unwrap();
                client.throughput(day, sk_runtime::Per::Hour, None).await.unwrap();
                client.task_type_rate_limits().await.unwrap();
                client.tenants("per_account").await.unwrap()
            });
        }
        while let Some(read) = reads.join_next().await {
            assert_eq!(read.unwrap().len(), 3);
        }
        db.drop().await;
    }
}
