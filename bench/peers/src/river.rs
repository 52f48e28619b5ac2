//! River's Rust client through its public API: `JobArgs`, `Client::insert` and
//! `insert_many`, `Workers::add_fn`, with its minimum fetch cooldown.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use riverqueue::migrate::PostgresMigrator;
use riverqueue::{
    BoxError as RiverError, Client, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome, Workers,
};
use serde::{Deserialize, Serialize};

use super::{Args, BoxError, Noop, Queue, CHUNK, POOL, RUNS};

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

pub(super) struct River;

/// A fresh database with River's schema, a client on it (not started), and sk's sqlx
/// pool for the burn-down's end.
async fn fresh(args: &Args) -> Result<(Client, sqlx::PgPool), BoxError> {
    let url = super::fresh_database(args, "peers_river").await?;
    let pool = riverqueue::sqlx::postgres::PgPoolOptions::new()
        .max_connections(POOL)
        .connect(&url)
        .await?;
    PostgresMigrator::new(pool.clone()).migrate_up().await?;
    let mut workers = Workers::new();
    workers.add_fn(noop)?;
    workers.add_fn(ping)?;
    let client = Client::builder(pool)
        .workers(workers)
        // Its minimum: throughput is bounded by one fetch per cooldown (its docs).
        .fetch_cooldown(riverqueue::FETCH_COOLDOWN_MIN)
        .queue(
            "default",
            QueueConfig::new(args.concurrency).with_fetch_poll_interval(Duration::from_millis(100)),
        )
        .build()?;
    Ok((client, sqlx::PgPool::connect(&url).await?))
}

async fn fill(client: &Client, n: u64) -> Result<(), BoxError> {
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        client
            .insert_many((i..end).map(|n| PeerNoop(Noop { n })))
            .await?;
        i = end;
    }
    Ok(())
}

impl Queue for River {
    fn name(&self) -> &'static str {
        "river"
    }

    fn single(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let (client, pool) = fresh(&args).await?;
            let start = Instant::now();
            for n in 0..args.single {
                client.insert(PeerNoop(Noop { n })).await?;
            }
            let rate = args.single as f64 / start.elapsed().as_secs_f64();
            pool.close().await;
            Ok(rate)
        })
    }

    fn bulk(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let (client, pool) = fresh(&args).await?;
            let start = Instant::now();
            fill(&client, args.jobs).await?;
            let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
            pool.close().await;
            Ok(rate)
        })
    }

    fn burn_down(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let (client, pool) = fresh(&args).await?;
            fill(&client, args.jobs).await?;
            sqlx::query("VACUUM ANALYZE river_job")
                .execute(&pool)
                .await?;
            let start = Instant::now();
            let mut run = client.start()?;
            // River keeps a completed job's row (state 'completed').
            super::until_done(&pool, || {
                let pool = pool.clone();
                async move {
                    Ok(sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM river_job WHERE state <> 'completed')",
                    )
                    .fetch_one(&pool)
                    .await?)
                }
            })
            .await?;
            let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
            run.stop().await?;
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
            let (client, pool) = fresh(&args).await?;
            let mut run = client.start()?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let samples = super::pings(args.latency_jobs, |sent| {
                let client = &client;
                async move {
                    client.insert(PeerPing { sent }).await?;
                    Ok(())
                }
            })
            .await?;
            run.stop().await?;
            pool.close().await;
            Ok(samples)
        })
    }
}
