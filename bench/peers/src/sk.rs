//! sk through its public API: `#[job]`, `Enqueue::enqueue_many`, `Worker`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sk_runtime::{job, Enqueue, Schema, Worker};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use super::{Args, BoxError, Queue, CHUNK, POOL, RUNS};

#[job]
async fn peer_noop(n: u64) {
    let _ = n;
    RUNS.fetch_add(1, Ordering::Relaxed);
}

#[job]
async fn peer_ping(sent: i64) {
    super::pinged(sent);
}

pub(super) struct Sk;

async fn fresh(args: &Args) -> Result<PgPool, BoxError> {
    let url = super::fresh_database(args, "peers_sk").await?;
    let pool = PgPoolOptions::new()
        .max_connections(POOL)
        .connect(&url)
        .await?;
    sk_runtime::migrate(&pool, &Schema::default()).await?;
    Ok(pool)
}

async fn fill(pool: &PgPool, n: u64) -> Result<(), BoxError> {
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        Enqueue::enqueue_many(pool, (i..end).map(PeerNoop::new)).await?;
        i = end;
    }
    Ok(())
}

/// A worker of `types` at `concurrency`, running until the returned sender fires.
fn start_worker(
    pool: &PgPool,
    types: &[&str],
    concurrency: usize,
) -> Result<
    (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<sk_runtime::Result<()>>,
    ),
    BoxError,
> {
    let worker = Worker::builder(pool.clone())
        .task_types(types.iter().copied())
        .concurrency(concurrency)
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
    }));
    Ok((stop, running))
}

impl Queue for Sk {
    fn name(&self) -> &'static str {
        "sk"
    }

    fn single(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let pool = fresh(&args).await?;
            let start = Instant::now();
            for i in 0..args.single {
                PeerNoop::new(i).enqueue(&pool).await?;
            }
            let rate = args.single as f64 / start.elapsed().as_secs_f64();
            pool.close().await;
            Ok(rate)
        })
    }

    fn bulk(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let pool = fresh(&args).await?;
            let start = Instant::now();
            fill(&pool, args.jobs).await?;
            let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
            pool.close().await;
            Ok(rate)
        })
    }

    fn burn_down(&self, args: &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>> + '_>> {
        let args = args.clone();
        Box::pin(async move {
            let pool = fresh(&args).await?;
            fill(&pool, args.jobs).await?;
            sqlx::query("VACUUM ANALYZE sk_tasks_queue_t")
                .execute(&pool)
                .await?;
            let start = Instant::now();
            let (stop, running) = start_worker(&pool, &["peer_noop"], args.concurrency)?;
            super::until_done(&pool, || {
                let pool = pool.clone();
                async move {
                    Ok(
                        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sk_tasks_queue_t)")
                            .fetch_one(&pool)
                            .await?,
                    )
                }
            })
            .await?;
            let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
            let _ = stop.send(());
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
            let pool = fresh(&args).await?;
            let (stop, running) = start_worker(&pool, &["peer_ping"], args.concurrency)?;
            // The worker comes up and goes idle (LISTEN established).
            tokio::time::sleep(Duration::from_millis(500)).await;
            let samples = super::pings(args.latency_jobs, |sent| {
                let pool = pool.clone();
                async move {
                    PeerPing::new(sent).enqueue(&pool).await?;
                    Ok(())
                }
            })
            .await?;
            let _ = stop.send(());
            running.await??;
            pool.close().await;
            Ok(samples)
        })
    }
}
