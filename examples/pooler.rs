//! What a transaction pooler costs sk: the same work on PostgreSQL directly, directly with
//! sqlx's statement cache off (sk then runs every statement unnamed and in a transaction,
//! as behind a pooler), and through PgBouncer in transaction mode (Debian's 1.18, started
//! here in a temporary directory, 20 server connections).
//!
//! ```sh
//! apt-get install -y pgbouncer
//! cargo build --release -p sk-examples --bin pooler
//! target/release/pooler [--jobs 50000] [--singles 5000] [--repeat 3]
//! ```
//!
//! Per way of connecting, in a fresh database each time (the `DATABASE_URL` server, the
//! local one by default), medians of `--repeat` runs:
//! - single enqueue: `--singles` jobs, one `enqueue(&pool)` at a time, from 4 tasks;
//! - bulk enqueue: `--jobs` jobs by `enqueue_many` of 1,000;
//! - burn-down: those jobs, no-op, one worker at concurrency 16 (polling behind the
//!   pooler: no LISTEN there), from the worker's start to the last result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use sk_runtime::{job, Schema, Worker};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

#[path = "../tests/support/cluster.rs"]
#[allow(unreachable_pub, dead_code)]
mod cluster;
#[path = "../tests/support/pgbouncer.rs"]
#[allow(unreachable_pub, dead_code)]
mod pgbouncer;

/// A way of connecting: the URL of a database for it.
type UrlOf = fn(&str, &pgbouncer::PgBouncer) -> String;

#[job]
async fn pooler_noop(n: u64) {
    let _ = n;
}

struct Args {
    jobs: u64,
    singles: u64,
    repeat: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        jobs: 50_000,
        singles: 5_000,
        repeat: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: u64 = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
        match flag.as_str() {
            "--jobs" => a.jobs = n,
            "--singles" => a.singles = n,
            "--repeat" => a.repeat = n as usize,
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
            eprintln!("pooler: {e}");
            std::process::exit(2);
        }
    };
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let direct: PgConnectOptions = url.parse().unwrap();
    let upstream = format!("{}:{}", direct.get_host(), direct.get_port());
    let bouncer = pgbouncer::PgBouncer::start(&upstream, 20);
    let ways: [(&str, UrlOf); 3] = [
        ("direct", |db, _| db.to_owned()),
        ("direct, cache off", |db, _| {
            format!("{db}?statement-cache-capacity=0")
        }),
        ("pgbouncer", |db, b| b.url_of(db)),
    ];
    println!(
        "pooler: {} jobs, {} single enqueues, median of {}",
        args.jobs, args.singles, args.repeat
    );
    let mut baseline = None;
    for (name, url_of) in ways {
        let mut runs = Vec::new();
        for _ in 0..args.repeat {
            let db = format!("sk_pooler_{}", uuid::Uuid::new_v4().simple());
            sqlx::query(&format!("CREATE DATABASE {db}"))
                .execute(&admin)
                .await
                .unwrap();
            let at = url_of(&with_database(&url, &db), &bouncer);
            runs.push(measure(&at, &args).await);
            sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
                .execute(&admin)
                .await
                .unwrap();
        }
        let median = |k: usize| {
            let mut v: Vec<f64> = runs.iter().map(|r| r[k]).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let figures = [median(0), median(1), median(2)];
        let base = *baseline.get_or_insert(figures);
        println!(
            "pooler {name}: single enqueue {:.0} jobs/s ({:.2}), bulk enqueue {:.0} jobs/s ({:.2}), \
             burn-down {:.0} jobs/s ({:.2})",
            figures[0],
            figures[0] / base[0],
            figures[1],
            figures[1] / base[1],
            figures[2],
            figures[2] / base[2]
        );
    }
}

/// Single enqueues a second, bulk enqueues a second, burn-down jobs a second.
async fn measure(url: &str, args: &Args) -> [f64; 3] {
    let pool = PgPoolOptions::new()
        .max_connections(24)
        .connect(url)
        .await
        .unwrap();
    sk_runtime::migrate(&pool, &Schema::default())
        .await
        .unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (pool, n) = (pool.clone(), args.singles / 4);
        tasks.push(tokio::spawn(async move {
            for i in 0..n {
                PoolerNoop::new(i).enqueue(&pool).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let singles = (args.singles / 4 * 4) as f64 / start.elapsed().as_secs_f64();
    sqlx::query("DELETE FROM sk_tasks_queue_t")
        .persistent(false)
        .execute(&mut *pool.begin().await.unwrap())
        .await
        .unwrap();
    let start = Instant::now();
    let all: Vec<u64> = (0..args.jobs).collect();
    for chunk in all.chunks(1_000) {
        PoolerNoop::enqueue_many(&pool, chunk.iter().map(|&n| PoolerNoop::new(n)))
            .await
            .unwrap();
    }
    let bulk = args.jobs as f64 / start.elapsed().as_secs_f64();
    let worker = Worker::builder(pool.clone())
        .concurrency(16)
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let start = Instant::now();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
    }));
    while done(&pool).await < args.jobs as i64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let burn = args.jobs as f64 / start.elapsed().as_secs_f64();
    let _ = stop.send(());
    running.await.unwrap().unwrap();
    pool.close().await;
    [singles, bulk, burn]
}

async fn done(pool: &PgPool) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let n = sqlx::query_scalar("SELECT count(*) FROM sk_task_results_t WHERE task_status = 3")
        .persistent(false)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    n
}

/// `url` with its database name replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    match base[scheme_end..].find('/') {
        Some(i) => format!("{}/{db}", &base[..scheme_end + i]),
        None => format!("{base}/{db}"),
    }
}
