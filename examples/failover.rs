//! Repeated failovers of a replicated PostgreSQL under a burn-down with enqueues going on,
//! with a synchronous standby and then an asynchronous one: what each failover loses,
//! doubles, and how long work stops.
//!
//! ```sh
//! apt-get install -y postgresql-15-auto-failover
//! cargo build --release -p sk-examples --bin failover
//! target/release/failover [--failovers 5] [--jobs 20000] [--modes sync,async] [--default-timeouts]
//! ```
//!
//! Each mode starts a pg_auto_failover cluster of its own (the tests' `cluster` helper:
//! monitor and two nodes in a temporary directory). Each round preloads `--jobs` jobs,
//! starts a worker in this process (concurrency 16) and an enqueuer (one job a call,
//! every 2 ms), both through the URL that lists the two hosts, kills the primary's
//! `pg_autoctl` and PostgreSQL with SIGKILL once a third of the preload is done, waits
//! for the burn-down, checks, and starts the dead node again, which rejoins as the
//! standby for the next round. Each job writes one row in its own transaction
//! (`ha_effects`) and counts its runs in this process.
//!
//! Per round: the pause (from the kill to the first completion after it), acknowledged
//! enqueues lost (returned `Ok` but not on the new primary), jobs whose write is there
//! twice, jobs that ran twice (a completion lost with the old primary runs the job
//! again), and failed enqueue calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sk_runtime::{job, JobContext, JobError, Worker};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

#[path = "../tests/support/cluster.rs"]
#[allow(unreachable_pub, dead_code)]
mod cluster;

/// Runs of each job in this process.
fn runs() -> &'static Mutex<HashMap<Uuid, u32>> {
    static RUNS: OnceLock<Mutex<HashMap<Uuid, u32>>> = OnceLock::new();
    RUNS.get_or_init(Mutex::default)
}

/// A job that writes one row in its own transaction.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn ha_write(
    n: u64,
    ctx: JobContext,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<(), JobError> {
    let _ = n;
    *runs().lock().unwrap().entry(ctx.id()).or_default() += 1;
    sqlx::query("INSERT INTO ha_effects (task_id) VALUES ($1)")
        .bind(ctx.id())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

struct Args {
    failovers: usize,
    jobs: u64,
    modes: Vec<bool>,
    default_timeouts: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        failovers: 5,
        jobs: 20_000,
        modes: vec![true, false],
        default_timeouts: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--failovers" => a.failovers = value()?.parse().map_err(|e| format!("{e}"))?,
            "--jobs" => a.jobs = value()?.parse().map_err(|e| format!("{e}"))?,
            "--modes" => {
                a.modes = value()?
                    .split(',')
                    .map(|m| match m {
                        "sync" => Ok(true),
                        "async" => Ok(false),
                        other => Err(format!("--modes: {other:?} is neither sync nor async")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--default-timeouts" => a.default_timeouts = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("failover: {e}");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "sk_runtime::store::postgres::primary=warn".into()),
        )
        .with_ansi(false)
        .init();
    for &synchronous in &args.modes {
        mode(&args, synchronous).await;
    }
}

async fn mode(args: &Args, synchronous: bool) {
    let name = if synchronous { "sync" } else { "async" };
    let mut cluster = cluster::Cluster::start(synchronous).await;
    if args.default_timeouts {
        cluster.monitor_defaults().await;
    }
    let url = cluster.url();
    let pool = sk_runtime::primary_pool(PgPoolOptions::new().max_connections(24), &url).unwrap();
    sk_runtime::migrate(&pool, &sk_runtime::Schema::default())
        .await
        .unwrap();
    sqlx::query("CREATE TABLE ha_effects (task_id uuid NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    println!(
        "failover {name}: {} rounds of {} jobs, demote wait {}",
        args.failovers,
        args.jobs,
        if args.default_timeouts {
            "30 s (default)".to_owned()
        } else {
            format!("{} s", cluster::DEMOTE_WAIT.as_secs())
        }
    );
    let mut totals = [0u64; 4];
    for round in 1..=args.failovers {
        let r = round_of(&mut cluster, &pool, args.jobs).await;
        println!(
            "failover {name} round {round}: pause {:.1} s, acknowledged {}, lost {}, written twice {}, \
             ran twice {}, failed enqueue calls {}",
            r.pause.as_secs_f64(),
            r.acknowledged,
            r.lost,
            r.written_twice,
            r.ran_twice,
            r.failed_calls
        );
        totals[0] += r.lost;
        totals[1] += r.written_twice;
        totals[2] += r.ran_twice;
        totals[3] += r.acknowledged;
    }
    println!(
        "failover {name} total: acknowledged {}, lost {}, written twice {}, ran twice {}",
        totals[3], totals[0], totals[1], totals[2]
    );
    pool.close().await;
}

struct Round {
    pause: Duration,
    acknowledged: u64,
    lost: u64,
    written_twice: u64,
    ran_twice: u64,
    failed_calls: u64,
}

async fn round_of(cluster: &mut cluster::Cluster, pool: &PgPool, jobs: u64) -> Round {
    runs().lock().unwrap().clear();
    sqlx::query("TRUNCATE ha_effects")
        .execute(pool)
        .await
        .unwrap();
    let mut acknowledged = Vec::new();
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(5_000) {
        acknowledged.extend(
            HaWrite::enqueue_many(pool, chunk.iter().map(|&n| HaWrite::new(n)))
                .await
                .unwrap(),
        );
    }
    let worker = Worker::builder(pool.clone())
        .concurrency(16)
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let (stop_worker, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let enqueuer = tokio::spawn({
        let (pool, stop) = (pool.clone(), stop.clone());
        async move {
            let (mut ids, mut failed) = (Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                match HaWrite::new(0).enqueue(&pool).await {
                    Ok(id) => ids.push(id),
                    Err(_) => failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (ids, failed)
        }
    });
    let done = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sk_task_results_t WHERE task_status = 3")
            .fetch_one(pool)
            .await
            .unwrap_or(0)
    };
    let before = done().await;
    while done().await < before + (jobs / 3) as i64 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let primary = cluster.primary().await.expect("a primary");
    let killed_at = chrono::Utc::now();
    cluster.kill(primary);
    // Work goes on again once a job completes after the kill.
    loop {
        let after: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sk_task_results_t WHERE task_processing_finalized_at_ts > $1",
        )
        .bind(killed_at + chrono::Duration::seconds(1))
        .fetch_one(pool)
        .await
        .unwrap_or(0);
        if after > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (ids, failed_calls) = enqueuer.await.unwrap();
    acknowledged.extend(ids);
    // Drained: nothing left in the queue for 2 s.
    let mut empty_since: Option<Instant> = None;
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM sk_tasks_queue_t")
            .fetch_one(pool)
            .await
            .unwrap_or(1);
        match (left, empty_since) {
            (0, Some(t)) if t.elapsed() > Duration::from_secs(2) => break,
            (0, None) => empty_since = Some(Instant::now()),
            (0, Some(_)) => {}
            _ => empty_since = None,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop_worker.send(());
    worker.await.unwrap().unwrap();
    let present: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sk_task_results_t WHERE task_status = 3 AND task_id = ANY($1)",
    )
    .bind(&acknowledged)
    .fetch_one(pool)
    .await
    .unwrap();
    let written_twice: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT task_id FROM ha_effects GROUP BY task_id HAVING count(*) > 1) d",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    // The pause: the longest gap between two completions around the kill.
    let pause_s: Option<f64> = sqlx::query_scalar(
        "SELECT max(extract(epoch FROM gap))::float8 FROM (
           SELECT lead(task_processing_finalized_at_ts) OVER (ORDER BY task_processing_finalized_at_ts)
                  - task_processing_finalized_at_ts AS gap
           FROM sk_task_results_t
           WHERE task_processing_finalized_at_ts BETWEEN $1 - interval '1 second' AND $1 + interval '2 minutes') g",
    )
    .bind(killed_at)
    .fetch_one(pool)
    .await
    .unwrap();
    let pause = Duration::from_secs_f64(pause_s.unwrap_or_default());
    let ran_twice = runs().lock().unwrap().values().filter(|n| **n > 1).count() as u64;
    cluster.restart(primary).await;
    Round {
        pause,
        acknowledged: acknowledged.len() as u64,
        lost: acknowledged.len() as u64 - present as u64,
        written_twice: written_twice as u64,
        ran_twice,
        failed_calls,
    }
}
