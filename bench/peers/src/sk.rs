//! sk through its public API: `#[job]`, `Enqueue::enqueue_many`, `Worker`.

use std::ops::Range;
use std::sync::atomic::Ordering;

use sk_runtime::{job, Enqueue, Schema, Worker};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Args, BoxError, Queue, POOL, RUNS};

#[job]
async fn peer_noop(n: u64) {
    let _ = n;
    RUNS.fetch_add(1, Ordering::Relaxed);
}

#[job]
async fn peer_ping(sent: i64) {
    super::pinged(sent);
}

pub(super) struct Sk {
    pool: PgPool,
    concurrency: usize,
    running: Option<(oneshot::Sender<()>, JoinHandle<sk_runtime::Result<()>>)>,
}

impl Queue for Sk {
    const NAME: &'static str = "sk";
    const TABLE: &'static str = "sk_tasks_queue_t";
    // A job's queue row goes when its outcome is recorded.
    const LEFT: &'static str = "SELECT EXISTS (SELECT 1 FROM sk_tasks_queue_t)";

    async fn open(args: &Args, concurrency: usize, _throughput: bool) -> Result<Self, BoxError> {
        let url = super::fresh_database(args, "peers_sk").await?;
        let pool = PgPoolOptions::new()
            .max_connections(POOL)
            .connect(&url)
            .await?;
        sk_runtime::migrate(&pool, &Schema::default()).await?;
        Ok(Sk {
            pool,
            concurrency,
            running: None,
        })
    }

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn insert_one(&self, n: u64) -> Result<(), BoxError> {
        PeerNoop::new(n).enqueue(&self.pool).await?;
        Ok(())
    }

    async fn insert_many(&self, range: Range<u64>) -> Result<(), BoxError> {
        Enqueue::enqueue_many(&self.pool, range.map(PeerNoop::new)).await?;
        Ok(())
    }

    async fn ping(&self, sent: i64) -> Result<(), BoxError> {
        PeerPing::new(sent).enqueue(&self.pool).await?;
        Ok(())
    }

    fn start(&mut self) -> Result<(), BoxError> {
        let worker = Worker::builder(self.pool.clone())
            .task_types(["peer_noop", "peer_ping"])
            .concurrency(self.concurrency)
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let running = tokio::spawn(worker.run_until(async move {
            let _ = stopped.await;
        }));
        self.running = Some((stop, running));
        Ok(())
    }

    async fn stop(self) -> Result<(), BoxError> {
        if let Some((stop, running)) = self.running {
            let _ = stop.send(());
            running.await??;
        }
        self.pool.close().await;
        Ok(())
    }
}
