//! graphile_worker through its public API: `TaskHandler`, `WorkerUtils::add_job` and
//! `add_jobs`, `WorkerOptions` with its local queue and batched completions.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, Worker, WorkerContext,
    WorkerOptions,
};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::{Args, BoxError, Noop, Queue, POOL, RUNS};

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

pub(super) struct Graphile {
    worker: Arc<Worker>,
    /// sk's sqlx on the same database (graphile_worker's own is sqlx 0.9).
    pool: sqlx::PgPool,
    running: Option<JoinHandle<Result<(), String>>>,
}

impl Queue for Graphile {
    const NAME: &'static str = "graphile";
    const TABLE: &'static str = "graphile_worker._private_jobs";
    // A job that succeeded is deleted.
    const LEFT: &'static str = "SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)";

    /// Tuned for throughput as its guide advises: the local queue (batch fetches) and
    /// batched completions.
    async fn open(args: &Args, concurrency: usize, throughput: bool) -> Result<Self, BoxError> {
        let url = super::fresh_database(args, "peers_graphile").await?;
        let mut options = WorkerOptions::default()
            .database_url(&url)
            .max_pg_conn(POOL)
            .concurrency(concurrency)
            .schema("graphile_worker")
            .listen_os_shutdown_signals(false)
            .complete_job_batch_delay(Duration::from_millis(1))
            .define_job::<PeerNoop>()
            .define_job::<PeerPing>();
        if throughput {
            options = options.local_queue(
                LocalQueueConfig::default()
                    .with_size(500)
                    .with_ttl(Duration::from_secs(300)),
            );
        }
        Ok(Graphile {
            worker: Arc::new(options.init().await?),
            pool: sqlx::PgPool::connect(&url).await?,
            running: None,
        })
    }

    fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    async fn insert_one(&self, n: u64) -> Result<(), BoxError> {
        let utils = self.worker.create_utils();
        utils
            .add_job(PeerNoop(Noop { n }), JobSpec::default())
            .await?;
        Ok(())
    }

    async fn insert_many(&self, range: Range<u64>) -> Result<(), BoxError> {
        let spec = JobSpec::default();
        let jobs: Vec<(PeerNoop, &JobSpec)> =
            range.map(|n| (PeerNoop(Noop { n }), &spec)).collect();
        self.worker.create_utils().add_jobs(&jobs).await?;
        Ok(())
    }

    async fn ping(&self, sent: i64) -> Result<(), BoxError> {
        let utils = self.worker.create_utils();
        utils.add_job(PeerPing { sent }, JobSpec::default()).await?;
        Ok(())
    }

    fn start(&mut self) -> Result<(), BoxError> {
        let worker = self.worker.clone();
        self.running = Some(tokio::spawn(async move {
            worker.run().await.map_err(|e| e.to_string())
        }));
        Ok(())
    }

    async fn stop(self) -> Result<(), BoxError> {
        if let Some(running) = self.running {
            self.worker.request_shutdown();
            running.await??;
        }
        self.pool.close().await;
        Ok(())
    }
}
