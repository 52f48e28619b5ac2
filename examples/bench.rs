//! Benchmark: sk against the database's own limit, on the same machine and in one run.
//!
//! ```text
//! cargo run --release -p sk-examples --bin bench -- [--jobs 100000] [--single 5000]
//!     [--concurrency 1000] [--slow-jobs 20000] [--latency-jobs 500] [--old-results 0]
//!     [--repeat 1] [--only NAME,...] [--backend postgres|sqlite|mysql]
//! ```
//! Prints one line per figure, `name value unit`, machine-readable; with `--repeat R` each
//! measure runs R times and the median is printed (the runs go to stderr). sk's measures
//! and their raw baselines run in alternation (sk, raw, sk, raw, ...), and `NAME_ratio` is
//! the median of the ratios of those back-to-back pairs: the machine's speed drifts over
//! minutes, a pair sees the same machine. Measures:
//! - `enqueue_single`: N jobs enqueued one at a time (one statement, one commit each), one
//!   client; `raw_insert_single`: the same with one plain INSERT per transaction into a
//!   plain table of the queue table's shape.
//! - `enqueue_bulk`: N jobs through `enqueue_many` (10,000 per call); `raw_insert_bulk`:
//!   INSERT ... SELECT FROM unnest(...) into the plain table; `raw_copy_bulk`: the same
//!   rows through COPY (text format), 10,000 per statement. `enqueue_bulk` is measured
//!   beside each.
//! - `burn_down`: a backlog of N no-op jobs run by one worker at `--concurrency`, from the
//!   first claim to the last result recorded; `--old-results M` first fills the results
//!   table with M finished jobs, to show that history does not slow the claim; `raw_burn_down`: the same backlog in the plain
//!   table, four clients each claiming 100 rows with SKIP LOCKED and deleting them in one
//!   statement. Both note the PostgreSQL server's CPU time per job over the burn-down
//!   (`{measure}_server_cpu_us_per_job` for every measure that burns a backlog down, all
//!   `postgres` processes on this machine, from `/proc`) and the write-ahead log written
//!   per job (`{measure}_wal_bytes_per_job`, from `pg_current_wal_lsn()`);
//!   `burn_down_server_cpu_ratio` is the raw baseline's over sk's: what sk asks of the
//!   server beside the bare claim and delete, steadier than throughput on a machine whose
//!   speed drifts.
//! - `burn_down_c16`: `burn_down` at concurrency 16, beside `raw_burn_down` and then
//!   beside `burn_down` at `--concurrency`: its second ratio is what a small
//!   concurrency keeps of a large one's throughput.
//! - `burn_down_no_history`: `burn_down_c16` by a worker that keeps no history of
//!   successes (`WorkerBuilder::result_retention` of zero), beside the same with it and
//!   then beside `min_burn_down`; both sk runs timed by the wall clock, from the first
//!   lease until the queue table is empty (polled every 5 ms).
//! - `burn_down_c1`: `burn_down` of `--single` jobs at concurrency 1;
//!   `raw_one_per_round_trip`: the same backlog in the plain table taken by one client one
//!   row per statement (claimed with SKIP LOCKED and deleted at once, one commit each).
//! - `burn_down_global_limit`: `burn_down` with a concurrency limit across workers on
//!   the jobs' queue, as high as the worker's concurrency (so it never binds): what each
//!   claim's row lock and count of running jobs cost, and (a limited queue is claimed for
//!   free slots only, without the prefetch) what the prefetch brings; beside
//!   `raw_burn_down` too.
//! - `burn_down_rated`: `burn_down` at concurrency 16 with a rate limit on the jobs'
//!   queue that never binds (10^9 a second): what the limit's claim costs (the limit's row
//!   locked, its log read and written in each claim's transaction, no prefetch), beside
//!   `burn_down_c16`; then with `20000/1s` on at most 100,000 jobs: the drain against the
//!   limit.
//! - `burn_down_fair`: `burn_down` at concurrency 16 of no-ops of 8 tenants in turn in a
//!   queue claimed fairly across them (`WorkerBuilder::fair`), beside `burn_down_c16`:
//!   what a fair claim's probe per tenant, its claim per tenant and its smaller prefetch
//!   cost.
//! - `burn_down_tenant_limit`: the same 8 tenants' no-ops at concurrency 16 under a limit
//!   of running jobs per tenant as high as the concurrency (so it never binds), beside
//!   `burn_down_c16`: what the queue's row lock, the count of each tenant's running jobs
//!   and the claims per tenant cost, without the prefetch; then under a rate limit per
//!   tenant that never binds (10^9 a second): what reading and writing each tenant's log
//!   of starts adds.
//! - `failure_storm`: `burn_down` of jobs whose first run fails and whose retry (at once)
//!   succeeds, every job run twice; beside `burn_down` of no-op jobs, its ratio says what
//!   a storm of failures costs against the same number of successes, and
//!   `failure_storm_runs_ratio` (twice that) compares runs finalized per second.
//! - `burn_down_traced`: `burn_down` with the job's `tracing` span enabled in the
//!   installed subscriber (`sk_runtime=info`); beside `burn_down` with it filtered out,
//!   its ratio is what the span costs per job; `burn_down_traced_cpu_ratio`, the
//!   untraced runs' CPU time per job of this process over the traced runs', is the same
//!   cost in the worker's CPU, steadier than throughput where the database is the limit.
//! - `burn_down_layered`: `burn_down` with every job run through a layer that only
//!   calls the rest (`WorkerBuilder::layer`), beside `burn_down`: what a layer stack
//!   costs per job; `burn_down_layered_cpu_ratio` is that cost in the worker's CPU.
//! - `burn_down_progress`: `burn_down` of jobs that each report their progress once
//!   (`JobContext::progress`, written at once: one `UPDATE` of the job's row a run),
//!   beside `burn_down`: what progress costs a job that uses it;
//!   `burn_down_progress_cpu_ratio` is that cost in the worker's CPU.
//! - `burn_down_batched`: `burn_down` of jobs enqueued as one batch (`Batch`), each
//!   outcome counted in the batch in the completion's transaction, beside `burn_down`:
//!   what a batch costs its jobs; `burn_down_batched_cpu_ratio` is that cost in the
//!   worker's CPU.
//! - `burn_down_history`: `burn_down` with 10,000,000 finished jobs of the three days
//!   before in the results table (UUIDv7 ids in their time partitions) and 1,000,000 jobs
//!   waiting behind the measured ones; beside `burn_down` on empty tables. Then a
//!   worker's retention (one day) retires the history: `retention_dropped_partitions`,
//!   `retention_seconds`, `retention_history_left` (rows of the history in partitions
//!   still there) and `retention_dead_tuples_before` / `_after` (dead tuples in every
//!   partition of the results table, by `pgstattuple`).
//! - `pickup_latency_p50/p95/p99/max`: with the worker idle, jobs enqueued one at a time at
//!   random 5-50 ms gaps; from just before `enqueue` to the handler's first line.
//! - `slow_jobs`: handlers that sleep 100 ms, at concurrency 256.
//! - `backlog_start`: what an application starting on a fresh database sees: 20,000 no-op
//!   jobs enqueued, then burned down at once by a worker at concurrency 16, with no vacuum
//!   or analyze in between; jobs per second over the first 2 s (the whole run and each
//!   second's count go to stderr). Shows how soon the worker's own vacuum and analyze
//!   keep up on a server without autovacuum.
//!
//! - `min_insert_single`, `min_insert_bulk` (1,000 rows a statement), `min_copy_bulk`
//!   and `min_burn_down` (16 clients each taking 100 rows with SKIP LOCKED and deleting
//!   them in one transaction): the same on the minimal queue table of `bench_raw.rs`,
//!   the physical limit, beside `enqueue_single`, `enqueue_bulk`, `burn_down` and
//!   `burn_down_c16`; `{measure}_server_cpu_ratio of_min` and `{measure}_wal_ratio
//!   of_min` compare the burn-downs' server CPU and WAL per job.
//!
//! - `--only profile` (never run unless named): `burn_down_c16` and `min_burn_down`, each
//!   alone, for a profile of the server: with `SK_BENCH_PROFILE=DIR` each burn-down
//!   records `perf`, `pg_stat_statements` and its WAL range there (`bench_profile.rs`;
//!   `examples/profile_postgres.sh` runs it all on a server of its own).
//!
//! Uses schemas `sk_bench`, `sk_bench_raw` and `sk_bench_min`, recreated at each start.
//!
//! `--backend sqlite` runs the measures SQLite has against SQLite's own raw SQL
//! (`bench_sqlite.rs`), in a file in the temp dir; no server needed. `--backend mysql`
//! does the same on MySQL/MariaDB (`bench_mysql.rs`, server at `MYSQL_URL`). Both have
//! `burn_down_c16_rated` (a rate limit that never binds), `burn_down_c16_fair` (no-ops
//! of 8 tenants claimed fairly) and `burn_down_c16_tenant_limit` (the same under a limit
//! of running jobs per tenant that never binds) beside `burn_down_c16`.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sk_runtime::{
    job, Client, Data, Enqueue, JobContext, JobError, ManualClock, RateLimit, Schema, Worker,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

use figures::{cpu_seconds, side_median, FIGURES};

#[path = "bench_burn.rs"]
mod burn;
#[path = "bench_figures.rs"]
mod figures;
#[path = "bench_mysql.rs"]
mod mysql;
#[path = "bench_pairs.rs"]
mod pairs;
#[path = "bench_profile.rs"]
mod profile;
#[path = "bench_raw.rs"]
mod raw;
#[path = "bench_run.rs"]
mod run;
#[path = "bench_side.rs"]
mod side;
#[path = "bench_sqlite.rs"]
mod sqlite;

/// The queue of `bench_noop` (the default), which `burn_down_rated` limits.
const QUEUE_OF_NOOP: &str = "default";

#[job]
async fn bench_noop(n: u64) {
    let _ = n;
}

/// Reports its progress once: the first value of a run is written at once.
#[job]
async fn bench_progress(n: u64, ctx: JobContext) -> Result<(), JobError> {
    ctx.progress(serde_json::json!({ "done": n })).await?;
    Ok(())
}

#[job]
async fn bench_sleep(n: u64) {
    let _ = n;
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Fails its first run and succeeds when retried, at once: a failure storm's work.
#[job(max_attempts = 2, backoff = "constant", backoff_base = "0s")]
async fn bench_flaky(n: u64, ctx: JobContext) -> Result<(), JobError> {
    let _ = n;
    if ctx.attempt() == 1 {
        return Err(JobError::new("the first run fails"));
    }
    Ok(())
}

/// What a burn-down's jobs do.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    Noop,
    /// No-ops, each run through a layer that only calls the rest (`WorkerBuilder::layer`).
    Layered,
    /// Jobs that report their progress once (`JobContext::progress`).
    Progress,
    /// No-ops enqueued as one batch (`Batch`): each outcome counted in the batch.
    Batched,
    /// No-ops of 8 tenants in turn, claimed fairly across them (`WorkerBuilder::fair`).
    Fair,
    /// Sleep 100 ms.
    Sleep,
    /// Fail, then succeed on the retry.
    Flaky,
    /// No-ops run by a worker that keeps no history of successes (`result_retention`
    /// of zero): no results row, so timed by the wall clock from the first lease until
    /// the queue table is empty (polled every 5 ms).
    Forgotten,
    /// No-ops timed as `Forgotten` is, to compare with it.
    Walled,
}

/// A layer that only runs the rest: what a layer stack costs by itself.
struct Pass;

impl sk_runtime::Layer for Pass {
    fn around<'a>(
        &'a self,
        _ctx: &'a sk_runtime::JobContext,
        next: sk_runtime::Next<'a>,
    ) -> sk_runtime::LayerFuture<'a> {
        Box::pin(next.run())
    }
}

/// Reports the enqueue-to-start latency of each run.
struct Latency(mpsc::UnboundedSender<f64>);

#[job]
async fn bench_ping(sent_micros: i64, latency: Data<Latency>) {
    let _ = latency.0.send((now_micros() - sent_micros) as f64 / 1000.0);
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[derive(Clone)]
struct Args {
    jobs: u64,
    single: u64,
    concurrency: usize,
    slow_jobs: u64,
    latency_jobs: u64,
    old_results: u64,
    repeat: usize,
    only: Option<Vec<String>>,
    backend: String,
}

impl Args {
    fn wants(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| o == name))
    }

    /// Whether `--only` names `name`: for runs that go only when asked for.
    fn names(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_some_and(|only| only.iter().any(|o| o == name))
    }
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        jobs: 100_000,
        single: 5_000,
        concurrency: 1000,
        slow_jobs: 20_000,
        latency_jobs: 500,
        old_results: 0,
        repeat: 1,
        only: None,
        backend: "postgres".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--jobs" => a.jobs = num()?,
            "--single" => a.single = num()?,
            "--concurrency" => a.concurrency = num()? as usize,
            "--slow-jobs" => a.slow_jobs = num()?,
            "--latency-jobs" => a.latency_jobs = num()?,
            "--old-results" => a.old_results = num()?,
            "--repeat" => a.repeat = num()?.max(1) as usize,
            "--only" => a.only = Some(value.split(',').map(str::to_owned).collect()),
            "--backend" if ["postgres", "sqlite", "mysql"].contains(&value.as_str()) => {
                a.backend = value
            }
            "--backend" => return Err(format!("--backend {value}: postgres, sqlite or mysql")),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Sets a limit of running jobs per tenant of the no-op queue that never binds (each
/// tenant's at most `concurrency`, the worker's): what the limit's claim costs (SQLite,
/// MySQL; on a fresh database, so nothing to lift).
async fn open_tenant_limit(
    pool: impl Into<sk_runtime::Pool>,
    concurrency: usize,
) -> Result<(), BoxError> {
    let limit = Some(u32::try_from(concurrency)?);
    Client::new(pool)
        .set_tenant_limit(QUEUE_OF_NOOP, limit)
        .await?;
    Ok(())
}

/// Enqueues jobs `0..n`, each made by `job`, 10,000 per `enqueue_many` call (any backend).
async fn enqueue_chunks<'e, J, E>(
    executor: E,
    n: u64,
    job: impl Fn(u64) -> Enqueue<J>,
) -> Result<(), BoxError>
where
    J: sk_runtime::Job,
    E: sk_runtime::Executor<'e> + Copy,
{
    let mut i = 0;
    while i < n {
        let end = (i + 10_000).min(n);
        Enqueue::enqueue_many(executor, (i..end).map(&job)).await?;
        i = end;
    }
    Ok(())
}

/// The `failure_storm_runs_ratio` line of a failure storm's `ratio` per job: each storm
/// job runs twice (the failure, then the retry), so per run it is twice that.
fn storm_runs_line(ratio: f64) -> String {
    format!(
        "failure_storm_runs_ratio {:.2} of_burn_down_runs",
        2.0 * ratio
    )
}

struct Bench {
    pool: PgPool,
    schema: Schema,
    args: Args,
    results: Vec<(String, f64, &'static str)>,
    /// Per sk measure, the median of its ratios to the raw baseline run beside it.
    ratios: Vec<(&'static str, &'static str, f64)>,
}

/// A measure's name, unit and run.
type Measure<'f> = (
    &'static str,
    &'static str,
    &'f (dyn for<'a> Fn(
        &'a Bench,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<f64, BoxError>> + Send + 'a>,
    > + Sync),
);

/// The installed subscriber's filter, switched by `burn_down_traced`.
static FILTER: std::sync::OnceLock<
    tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>,
> = std::sync::OnceLock::new();

/// The filter from `RUST_LOG`, or `warn`.
fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into())
}

#[tokio::main]
async fn main() {
    // RUST_LOG=sk_runtime=debug shows the worker's vacuums and every job. Colours only on
    // a terminal, as the quickstart and a service logging to a file or a collector have
    // it (with them, styling the span's field names is about half of what the span
    // costs; docs/performance.md).
    let (filter, handle) = tracing_subscriber::reload::Layer::new(env_filter());
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();
    let _ = FILTER.set(handle);
    if let Err(e) = run::run().await {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_owned())
        })
        .unwrap_or_default();
    format!("{cpus} cpus, MemTotal {mem} kB")
}

impl Bench {
    fn wants(&self, name: &str) -> bool {
        self.args.wants(name)
    }

    /// Runs `f` `repeat` times (each on empty tables) and records the median rate.
    async fn measure<F>(&mut self, name: &str, unit: &'static str, f: F) -> Result<(), BoxError>
    where
        F: for<'a> Fn(
            &'a Bench,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<f64, BoxError>> + Send + 'a>,
        >,
    {
        let mut runs = Vec::new();
        for i in 0..self.args.repeat {
            self.reset().await?;
            FIGURES.start(name);
            let v = f(self).await?;
            eprintln!("bench: {name} run {} = {v:.1} {unit}", i + 1);
            runs.push(v);
        }
        runs.sort_by(f64::total_cmp);
        self.results
            .push((name.to_owned(), runs[runs.len() / 2], unit));
        Ok(())
    }

    /// Runs sk's measure and its raw-SQL baseline alternately, `repeat` times each (each
    /// run on empty tables), and records both medians and the median of the ratios of
    /// each pair: the machine's speed drifts by tens of percent over minutes, and a pair
    /// run back to back sees the same machine.
    async fn measure_pair(&mut self, sk: Measure<'_>, raw: Measure<'_>) -> Result<(), BoxError> {
        let mut pairs = Vec::new();
        for i in 0..self.args.repeat {
            let mut pair = [0.0; 2];
            for (slot, (name, unit, f)) in [sk, raw].into_iter().enumerate() {
                self.reset().await?;
                FIGURES.start(name);
                pair[slot] = f(self).await?;
                eprintln!("bench: {name} run {} = {:.1} {unit}", i + 1, pair[slot]);
            }
            eprintln!(
                "bench: {} pair {} ratio = {:.2}",
                sk.0,
                i + 1,
                pair[0] / pair[1]
            );
            pairs.push(pair);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        for (slot, (name, unit, _)) in [sk, raw].into_iter().enumerate() {
            let value = median(pairs.iter().map(|p| p[slot]).collect());
            self.results.push((name.to_owned(), value, unit));
        }
        self.ratios.push((
            sk.0,
            raw.0,
            median(pairs.iter().map(|p| p[0] / p[1]).collect()),
        ));
        Ok(())
    }

    /// Empty tables (and a vacuumed catalog) for every measure.
    async fn reset(&self) -> Result<(), BoxError> {
        sqlx::query("DROP SCHEMA IF EXISTS sk_bench CASCADE")
            .execute(&self.pool)
            .await?;
        sk_runtime::migrate(&self.pool, &self.schema).await?;
        self.reset_raw().await
    }

    async fn enqueue_single(&self, n: u64) -> Result<f64, BoxError> {
        let start = Instant::now();
        for i in 0..n {
            Enqueue::new(BenchNoop::new(i))
                .with_schema(&self.schema)
                .enqueue(&self.pool)
                .await?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    async fn enqueue_bulk(&self, n: u64) -> Result<f64, BoxError> {
        let start = Instant::now();
        enqueue_chunks(&self.pool, n, |k| {
            Enqueue::new(BenchNoop::new(k)).with_schema(&self.schema)
        })
        .await?;
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    async fn latency(&mut self) -> Result<(), BoxError> {
        let mut all: HashMap<&str, Vec<f64>> = HashMap::new();
        for run in 0..self.args.repeat {
            self.reset().await?;
            let (tx, mut rx) = mpsc::unbounded_channel();
            let worker = Worker::builder(self.pool.clone())
                .schema(self.schema.clone())
                .task_types(["bench_ping"])
                .concurrency(16)
                .data(Latency(tx))
                .build()?;
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let running = tokio::spawn(worker.run_until(async move {
                let _ = stop_rx.await;
            }));
            // Let the worker come up and go idle (LISTEN established) before measuring.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut rng = now_micros() as u64 | 1;
            let mut samples = Vec::new();
            for _ in 0..self.args.latency_jobs {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                tokio::time::sleep(Duration::from_millis(5 + rng % 46)).await;
                Enqueue::new(BenchPing::new(now_micros()))
                    .with_schema(&self.schema)
                    .enqueue(&self.pool)
                    .await?;
            }
            for _ in 0..self.args.latency_jobs {
                match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
                    Ok(Some(ms)) => samples.push(ms),
                    _ => return Err("a latency job did not run within 10 s".into()),
                }
            }
            let _ = stop_tx.send(());
            running.await??;
            samples.sort_by(f64::total_cmp);
            let pick = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
            let (p50, p95, p99, max) = (
                pick(0.5),
                pick(0.95),
                pick(0.99),
                samples[samples.len() - 1],
            );
            eprintln!("bench: pickup latency run {}: p50 {p50:.2} p95 {p95:.2} p99 {p99:.2} max {max:.2} ms", run + 1);
            for (k, v) in [("p50", p50), ("p95", p95), ("p99", p99), ("max", max)] {
                all.entry(k).or_default().push(v);
            }
        }
        for k in ["p50", "p95", "p99", "max"] {
            let mut v = all.remove(k).unwrap_or_default();
            v.sort_by(f64::total_cmp);
            self.results
                .push((format!("pickup_latency_{k}"), v[v.len() / 2], "ms"));
        }
        Ok(())
    }
}
