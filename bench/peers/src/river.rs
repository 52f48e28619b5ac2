//! River's Rust client through its public API: `JobArgs`, `Client::insert` and
//! `insert_many`, `Workers::add_fn`, with its minimum fetch cooldown.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

use riverqueue::migrate::PostgresMigrator;
use riverqueue::{
    BoxError as RiverError, Client, Job, JobArgs, QueueConfig, RunHandle, WorkContext, WorkOutcome,
    Workers,
};
use serde::{Deserialize, Serialize};

use super::{Args, BoxError, Noop, Queue, POOL, RUNS};

#[derive(Clone, Serialize, Deserialize)]
struct PeerNoop(Noop);

impl JobArgs for PeerNoop {
    const KIND: &'static str = "peer_noop";
}

#[derive(Clone, Serialize, Deserialize)]
struct PeerPing {
    sent: i64,
}

impl JobArgs for PeerPing {
    const KIND: &'static str = "peer_ping";
}

async fn noop(_: WorkContext, job: Job<PeerNoop>) -> Result<WorkOutcome, RiverError> {
    let _ = job.args.0.n;
    RUNS.fetch_add(1, Ordering::Relaxed);
    Ok(WorkOutcome::Complete)
}

async fn ping(_: WorkContext, job: Job<PeerPing>) -> Result<WorkOutcome, RiverError> {
    super::pinged(job.args.sent);
    Ok(WorkOutcome::Complete)
}

pub(super) struct River {
    client: Client,
    /// sk's sqlx on the same database (River's own is sqlx 0.9).
    pool: sqlx::PgPool,
    running: Option<RunHandle>,
}

impl Queue for River {
    const NAME: &'static str = "river";
    const TABLE: &'static str = "river_job";
    // River keeps a completed job's row (state 'completed').
    const LEFT: &'static str = "SELECT EXISTS (SELECT 1 FROM river_job WHERE state <> 'completed')";

    async fn open(args: &Args, concurrency: usize, _throughput: bool) -> Result<Self, BoxError> {
        let url = super::fresh_database(args, "peers_river").await?;
        let river_pool = riverqueue::sqlx::postgres::PgPoolOptions::new()
            .max_connections(POOL)
            .connect(&url)
            .await?;
        PostgresMigrator::new(river_pool.clone())
            .migrate_up()
            .await?;
        let mut workers = Workers::new();
        workers.add_fn(noop)?;
        workers.add_fn(ping)?;
        let client = Client::builder(river_pool)
            .workers(workers)
            // Its minimum: throughput is bounded by one fetch per cooldown (its docs).
            .fetch_cooldown(riverqueue::FETCH_COOLDOWN_MIN)
            .queue(
                "default",
                QueueConfig::new(concurrency).with_fetch_poll_interval(Duration::from_millis(100)),
            )
            .build()?;
        Ok(River {
            client,
            pool: sqlx::PgPool::connect(&url).await?,
            running: None,
        })
    }

    fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    async fn insert_one(&self, n: u64) -> Result<(), BoxError> {
        self.client.insert(PeerNoop(Noop { n })).await?;
        Ok(())
    }

    async fn insert_many(&self, range: Range<u64>) -> Result<(), BoxError> {
        self.client
            .insert_many(range.map(|n| PeerNoop(Noop { n })))
            .await?;
        Ok(())
    }

    async fn ping(&self, sent: i64) -> Result<(), BoxError> {
        self.client.insert(PeerPing { sent }).await?;
        Ok(())
    }

    fn start(&mut self) -> Result<(), BoxError> {
        self.running = Some(self.client.start()?);
        Ok(())
    }

    async fn stop(self) -> Result<(), BoxError> {
        if let Some(mut running) = self.running {
            running.stop().await?;
        }
        self.pool.close().await;
        Ok(())
    }
}
