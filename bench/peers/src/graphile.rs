//! graphile_worker through its public API: `TaskHandler`, `WorkerUtils::add_job` and
//! `add_jobs`, `WorkerOptions` with its local queue and batched completions.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, Worker, WorkerContext,
    WorkerOptions,
};
use serde::{Deserialize, Serialize};

use super::{Args, BoxError, Noop, Queue, CHUNK, POOL, RUNS};

#[derive(Clone, Serialize, Deserialize)]
struct PeerNoop(Noop);

impl TaskHandler for PeerNoop {
    const IDENTIFIER: &'static str = "peer_noop";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        let _ = self.0.n;
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok::<(), String>(())
    }
}

#[derive(Clone, Serialize, Deserialize)]
struct PeerPing {
    sent: i64,
}

impl TaskHandler for PeerPing {
    const IDENTIFIER: &'static str = "peer_ping";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        super::pinged(self.sent);
        Ok::<(), String>(())
    }
}

pub(super) struct Graphile;

/// A fresh database and a worker on it (not running), tuned for throughput as its guide
/// advises: the local queue (batch fetches) and batched completions.
async fn fresh(args: &Args, local_queue: bool) -> Result<(Arc<Worker>, sqlx::PgPool), BoxError> {
    let url = super::fresh_database(args, "peers_graphile").await?;
    let mut options = WorkerOptions::default()
        .database_url(&url)
        .max_pg_conn(POOL)
        .concurrency(args.concurrency)
        .schema("graphile_worker")
        .listen_os_shutdown_signals(false)
        .complete_job_batch_delay(Duration::from_millis(1))
        .define_job::<PeerNoop>()
        .define_job::<PeerPing>();
    if local_queue {
        options = options.local_queue(
            LocalQueueConfig::default()
                .with_size(500)
                .with_ttl(Duration::from_secs(300)),
        );
    }
    let worker = options.init().await?;
    // sk's sqlx, for the burn-down's end: graphile_worker deletes a job that succeeded.
    let pool = sqlx::PgPool::connect(&url).await?;
    Ok((Arc::new(worker), pool))
}

async fn fill(worker: &Worker, n: u64) -> Result<(), BoxError> {
    let utils = worker.create_utils();
    let spec = JobSpec::default();
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        let jobs: Vec<(PeerNoop, &JobSpec)> =
            (i..end).map(|n| (PeerNoop(Noop { n }), &spec)).collect();
        utils.add_jobs(&jobs).await?;
        i = end;
    }
    Ok(())
}

fn spawn_worker(worker: &Arc<Worker>) -> tokio::task::JoinHandle<Result<(), String>> {
    let worker = worker.clone();
    tokio::spawn(async move { worker.run().await.map_err(|e| e.to_string()) })
}

impl Queue for Graphile {
    fn name(&self) -> &'static str {
        "graphile"
    }

    fn single(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let (worker, pool) = fresh(&args, false).await?;
            let utils = worker.create_utils();
            let start = Instant::now();
            for n in 0..args.single {
                utils
                    .add_job(PeerNoop(Noop { n }), JobSpec::default())
                    .await?;
            }
            let rate = args.single as f64 / start.elapsed().as_secs_f64();
            pool.close().await;
            Ok(rate)
        })
    }

    fn bulk(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let (worker, pool) = fresh(&args, false).await?;
            let start = Instant::now();
            fill(&worker, args.jobs).await?;
            let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
            pool.close().await;
            Ok(rate)
        })
    }

    fn burn_down(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let (worker, pool) = fresh(&args, true).await?;
            fill(&worker, args.jobs).await?;
            sqlx::query("VACUUM ANALYZE graphile_worker._private_jobs")
                .execute(&pool)
                .await?;
            let start = Instant::now();
            let running = spawn_worker(&worker);
            super::until_done(&pool, || {
                let pool = pool.clone();
                async move {
                    Ok(sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)",
                    )
                    .fetch_one(&pool)
                    .await?)
                }
            })
            .await?;
            let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
            worker.request_shutdown();
            running.await??;
            pool.close().await;
            Ok(rate)
        })
    }

    fn latency(
        &self,
        args: &Args,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<f64>, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            // No local queue: it trades latency for throughput (its guide).
            let (worker, pool) = fresh(&args, false).await?;
            let running = spawn_worker(&worker);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let utils = worker.create_utils();
            let samples = super::pings(args.latency_jobs, |sent| {
                let utils = &utils;
                async move {
                    utils.add_job(PeerPing { sent }, JobSpec::default()).await?;
                    Ok(())
                }
            })
            .await?;
            worker.request_shutdown();
            running.await??;
            pool.close().await;
            Ok(samples)
        })
    }
}
