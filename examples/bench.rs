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
    if let Err(e) = run().await {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let args = args()?;
    eprintln!("bench: {} on {}", machine(), args.backend);
    if args.backend == "sqlite" {
        return sqlite::run(args).await;
    }
    if args.backend == "mysql" {
        return mysql::run(args).await;
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await?;
    let mut b = Bench {
        pool,
        schema: Schema::new("sk_bench", "sk_")?,
        args,
        results: Vec::new(),
        ratios: Vec::new(),
    };
    b.reset().await?;

    if b.wants("enqueue_single") {
        let n = b.args.single;
        b.measure_pair(
            ("enqueue_single", "jobs/s", &|b| {
                Box::pin(b.enqueue_single(n))
            }),
            ("raw_insert_single", "rows/s", &|b| {
                Box::pin(b.raw_insert_single(n))
            }),
        )
        .await?;
        b.measure_pair(
            ("enqueue_single", "jobs/s", &|b| {
                Box::pin(b.enqueue_single(n))
            }),
            ("min_insert_single", "rows/s", &|b| {
                Box::pin(b.min_insert_single(n))
            }),
        )
        .await?;
    }
    if b.wants("enqueue_bulk") {
        let n = b.args.jobs;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("raw_insert_bulk", "rows/s", &|b| {
                Box::pin(b.raw_insert_bulk(n))
            }),
        )
        .await?;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("raw_copy_bulk", "rows/s", &|b| Box::pin(b.raw_copy_bulk(n))),
        )
        .await?;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("min_insert_bulk", "rows/s", &|b| {
                Box::pin(b.min_insert_bulk(n))
            }),
        )
        .await?;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("min_copy_bulk", "rows/s", &|b| Box::pin(b.min_copy_bulk(n))),
        )
        .await?;
    }
    if b.wants("burn_down") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
            ("raw_burn_down", "jobs/s", &|b| Box::pin(b.raw_burn_down(n))),
        )
        .await?;
        b.measure_pair(
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
            ("min_burn_down", "jobs/s", &|b| Box::pin(b.min_burn_down(n))),
        )
        .await?;
    }
    if b.wants("burn_down_c16") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
            ("raw_burn_down", "jobs/s", &|b| Box::pin(b.raw_burn_down(n))),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
            ("min_burn_down", "jobs/s", &|b| Box::pin(b.min_burn_down(n))),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_no_history") {
        // A worker that keeps no history of successes, beside one that does, both timed
        // by the wall clock; then against the minimal queue.
        let n = b.args.jobs;
        b.measure_pair(
            ("burn_down_c16_no_history", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Forgotten))
            }),
            ("burn_down_c16_wall", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Walled))
            }),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16_no_history", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Forgotten))
            }),
            ("min_burn_down", "jobs/s", &|b| Box::pin(b.min_burn_down(n))),
        )
        .await?;
    }
    if b.wants("burn_down_rated") {
        // A rate limit that never binds: what its claim (the limit's row locked, read
        // and written in the claim's transaction) costs.
        let n = b.args.jobs;
        let open = RateLimit::new(1_000_000_000, Duration::from_secs(1))?;
        b.measure_pair(
            ("burn_down_c16_rated", "jobs/s", &|b| {
                Box::pin(b.burn_down_rated(n, 16, open))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
        // One that binds: the drain against the limit.
        let tight = RateLimit::new(20_000, Duration::from_secs(1))?;
        b.measure_pair(
            ("burn_down_c16_at_20000_per_s", "jobs/s", &|b| {
                Box::pin(b.burn_down_rated(n.min(100_000), 16, tight))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_fair") {
        // The same no-ops, of 8 tenants, claimed fairly across them: what the tenants'
        // probes and per-tenant claims cost.
        let n = b.args.jobs;
        b.measure_pair(
            ("burn_down_c16_fair", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Fair))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_tenant_limit") {
        let n = b.args.jobs;
        b.measure_pair(
            ("burn_down_c16_tenant_limit", "jobs/s", &|b| {
                Box::pin(b.burn_down_tenant_limit(n, 16))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16_tenant_rate", "jobs/s", &|b| {
                Box::pin(b.burn_down_tenant_rate(n, 16))
            }),
            ("burn_down_c16_tenant_limit", "jobs/s", &|b| {
                Box::pin(b.burn_down_tenant_limit(n, 16))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_c1") {
        let n = b.args.single;
        b.measure_pair(
            ("burn_down_c1", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 1, Load::Noop))
            }),
            ("raw_one_per_round_trip", "jobs/s", &|b| {
                Box::pin(b.raw_one_per_round_trip(n))
            }),
        )
        .await?;
    }
    if b.wants("failure_storm") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("failure_storm", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Flaky))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_traced") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_traced", "jobs/s", &|b| {
                Box::pin(b.burn_down_traced(n, c))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_untraced", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_layered") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_layered", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_layered", n, c, Load::Layered))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_unlayered", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_progress") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_progress", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_progress", n, c, Load::Progress))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_unreported", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_batched") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_batched", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_batched", n, c, Load::Batched))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_unbatched", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_history") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_history", "jobs/s", &|b| {
                Box::pin(b.burn_down_history(n, c))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_global_limit") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_global_limit", "jobs/s", &|b| {
                Box::pin(b.burn_down_global_limit(n, c))
            }),
            ("raw_burn_down", "jobs/s", &|b| Box::pin(b.raw_burn_down(n))),
        )
        .await?;
    }
    if b.wants("latency") {
        b.latency().await?;
    }
    if b.wants("backlog_start") {
        b.measure("backlog_start_first_2s", "jobs/s", |b| {
            Box::pin(b.backlog_start(20_000, 16))
        })
        .await?;
    }
    if b.args.names("profile") {
        // Each burn-down alone (no pair), for a profile of the server (bench_profile.rs).
        let n = b.args.jobs;
        b.measure("burn_down_c16", "jobs/s", |b| {
            Box::pin(b.burn_down(n, 16, Load::Noop))
        })
        .await?;
        b.measure("min_burn_down", "jobs/s", |b| Box::pin(b.min_burn_down(n)))
            .await?;
    }
    if b.wants("slow_jobs") {
        let n = b.args.slow_jobs;
        b.measure("slow_jobs", "jobs/s", |b| {
            Box::pin(b.burn_down(n, 256, Load::Sleep))
        })
        .await?;
    }
    for (name, value, unit) in &b.results {
        println!("{name} {value:.1} {unit}");
    }
    let side = FIGURES.take();
    for line in figures::side_lines(&side) {
        println!("{line}");
    }
    for (name, baseline, ratio) in &b.ratios {
        let of = match *baseline {
            "raw_copy_bulk" => "raw_copy",
            "raw_one_per_round_trip" => "one_per_round_trip",
            b if b.starts_with("raw_") => "raw",
            "min_copy_bulk" => "min_copy",
            b if b.starts_with("min_") => "min",
            b => b,
        };
        println!("{name}_ratio {ratio:.2} of_{of}");
        // What the span, or the layer, costs in the worker's CPU: the runs' CPU per job
        // without it over theirs with it (1.0: nothing).
        for (with, without) in [
            ("traced", "untraced"),
            ("layered", "unlayered"),
            ("progress", "unreported"),
            ("batched", "unbatched"),
        ] {
            if *name != format!("burn_down_{with}") {
                continue;
            }
            if let (Some(on), Some(off)) = (
                side_median(&side, &format!("burn_down_{with}_cpu_us_per_job")),
                side_median(&side, &format!("burn_down_{without}_cpu_us_per_job")),
            ) {
                println!("burn_down_{with}_cpu_ratio {:.2} of_{without}", off / on);
            }
        }
        if *name == "failure_storm" {
            println!("{}", storm_runs_line(*ratio));
        }
        if name.starts_with("burn_down") && *baseline == "min_burn_down" {
            for line in figures::of_min_lines(&side, name) {
                println!("{line}");
            }
        }
        if *name == "burn_down" && *baseline == "raw_burn_down" {
            // The server's CPU per job, the raw baseline's over sk's (1.0: sk costs the
            // server no more than the bare claim and delete).
            if let (Some(sk), Some(raw)) = (
                side_median(&side, "burn_down_server_cpu_us_per_job"),
                side_median(&side, "raw_burn_down_server_cpu_us_per_job"),
            ) {
                println!("burn_down_server_cpu_ratio {:.2} of_raw", raw / sk);
            }
        }
    }
    Ok(())
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

    /// Fills the queue with `n` jobs (bulk, untimed), then times one worker burning them.
    async fn backlog_start(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
        enqueue_chunks(&self.pool, n, |k| {
            Enqueue::new(BenchNoop::new(k)).with_schema(&self.schema)
        })
        .await?;
        let worker = Worker::builder(self.pool.clone())
            .schema(self.schema.clone())
            .task_types(["bench_noop"])
            .concurrency(concurrency)
            .build()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let start = Instant::now();
        let running = tokio::spawn(worker.run_until(async move {
            let _ = stop_rx.await;
        }));
        // Jobs done at each quarter second.
        let mut done_at = Vec::new();
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_millis(250),
            Duration::from_millis(250),
        );
        loop {
            ticks.tick().await;
            let left: i64 = sqlx::query_scalar("SELECT count(*) FROM sk_bench.sk_tasks_queue_t")
                .fetch_one(&self.pool)
                .await?;
            done_at.push(n as i64 - left);
            if left == 0 {
                break;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        let _ = stop_tx.send(());
        running.await??;
        let per_second: Vec<i64> = done_at
            .iter()
            .skip(3)
            .step_by(4)
            .scan(0, |before, &done| {
                let in_second = done - *before;
                *before = done;
                Some(in_second)
            })
            .collect();
        eprintln!(
            "bench: backlog_start {n} jobs in {seconds:.2} s ({:.0} jobs/s); per whole second: {per_second:?}",
            n as f64 / seconds
        );
        // The first two seconds: where a queue table without statistics is slowest.
        let first = done_at.get(7).copied().unwrap_or(n as i64);
        let first_secs = (done_at.len().min(8) as f64) / 4.0;
        Ok(first as f64 / first_secs)
    }

    async fn burn_down_global_limit(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
        let client = Client::new(self.pool.clone()).schema(self.schema.clone());
        client
            .set_global_limit("default", Some(u32::try_from(concurrency)?))
            .await?;
        let result = self.burn_down(n, concurrency, Load::Noop).await;
        client.set_global_limit("default", None).await?;
        result
    }

    async fn burn_down_tenant_limit(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
        let client = Client::new(self.pool.clone()).schema(self.schema.clone());
        client
            .set_tenant_limit(QUEUE_OF_NOOP, Some(u32::try_from(concurrency)?))
            .await?;
        let result = self.burn_down(n, concurrency, Load::Fair).await;
        client.set_tenant_limit(QUEUE_OF_NOOP, None).await?;
        result
    }

    async fn burn_down_tenant_rate(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
        let client = Client::new(self.pool.clone()).schema(self.schema.clone());
        let open = RateLimit::new(1_000_000_000, Duration::from_secs(1))?;
        client
            .set_tenant_rate_limit(QUEUE_OF_NOOP, Some(open))
            .await?;
        let result = self.burn_down(n, concurrency, Load::Fair).await;
        client.set_tenant_rate_limit(QUEUE_OF_NOOP, None).await?;
        result
    }

    /// `burn_down` with the job's span enabled in the installed subscriber
    /// (`sk_runtime=info` beside `RUST_LOG`'s directives, events printed to stderr as
    /// an application's would be): what tracing costs per job when it is on.
    async fn burn_down_traced(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
        let filter = FILTER.get().ok_or("no reloadable subscriber installed")?;
        filter.reload(env_filter().add_directive("sk_runtime=info".parse()?))?;
        let result = self
            .burn_down_cpu("burn_down_traced", n, concurrency, Load::Noop)
            .await;
        filter.reload(env_filter())?;
        result
    }

    /// `burn_down` of no-op jobs, noting this process's CPU time per job (user and
    /// system, all threads: the worker's share of the cost, which throughput shows only
    /// where the worker, not the database, is the limit) as `{name}_cpu_us_per_job`.
    async fn burn_down_cpu(
        &self,
        name: &str,
        n: u64,
        concurrency: usize,
        load: Load,
    ) -> Result<f64, BoxError> {
        let before = cpu_seconds()?;
        let rate = self.burn_down(n, concurrency, load).await?;
        FIGURES.note_us_per_job(format!("{name}_cpu_us_per_job"), cpu_seconds()? - before, n);
        Ok(rate)
    }

    /// `burn_down` of `n` jobs on a database with a long history and a deep queue:
    /// 10,000,000 finished jobs posted over the three days before, in the time partitions
    /// a worker running then made, and 1,000,000 jobs waiting behind the measured ones
    /// (priority 1 against their 0; the worker goes on into them, only the measured ones
    /// count). Then a worker's retention retires the history's partitions; what it
    /// leaves is recorded (`retention_*`).
    async fn burn_down_history(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
        const HISTORY: i64 = 10_000_000;
        const WAITING: u64 = 1_000_000;
        let now = chrono::Utc::now();
        let before = self.partitions().await?;
        let from = now - chrono::Duration::days(3);
        // A worker of three days ago makes that day's partition and two ahead.
        let worker = Worker::builder(self.pool.clone())
            .schema(self.schema.clone())
            .task_types(["bench_sleep"])
            .clock(ManualClock::new(from))
            .build()?;
        let (made, _) = self
            .run_worker_until(worker, |b| async move {
                Ok(b.partitions().await? >= before + 3)
            })
            .await?;
        if !made {
            return Err("the partitions of three days ago were not made within 60 s".into());
        }
        let started = Instant::now();
        // UUIDv7 ids of the posting time (48 bits of milliseconds first), as sk's own.
        sqlx::query(
            "INSERT INTO sk_bench.sk_task_results_t (task_id, task_type, task_source, task_queue, task_status,
                task_priority, task_processing_time_milliseconds, task_posted_at_ts,
                task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                task_processing_finalized_at_ts)
             SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7'
                        || substr(md5(g::text), 1, 19))::uuid,
                    'old_job', 'app', 'default', 3, 0, 1, t, t, t, t
             FROM generate_series(1, $1) g,
                  LATERAL (SELECT $2::timestamptz + g * (interval '2 days' / $1) AS t) x",
        )
        .bind(HISTORY)
        .bind(from)
        .execute(&self.pool)
        .await?;
        enqueue_chunks(&self.pool, WAITING, |k| {
            Enqueue::new(BenchNoop::new(k))
                .with_schema(&self.schema)
                .with_priority(1)
        })
        .await?;
        // The setup's writes (some 3 GB of WAL with the first vacuum of the history) are
        // flushed before the measure: else the checkpoint they force lands in it (ratios of
        // 0.70 to 0.92 in one run), which is not what history costs the claim and finalize.
        for statement in [
            "VACUUM ANALYZE sk_bench.sk_task_results_t",
            "VACUUM ANALYZE sk_bench.sk_tasks_queue_t",
            "CHECKPOINT",
        ] {
            sqlx::query(statement).execute(&self.pool).await?;
        }
        eprintln!(
            "bench: burn_down_history: {HISTORY} results and {WAITING} waiting jobs written, vacuumed and checkpointed in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // The measured jobs, claimed first, then the worker as `burn_down` runs it.
        let rate = self.burn_down(n, concurrency, Load::Noop).await?;
        let partitions = self.partitions().await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            .execute(&self.pool)
            .await?;
        let dead_before = self.dead_results().await?;
        // Retention of a day: the partitions of the history's first two days are past it.
        let worker = Worker::builder(self.pool.clone())
            .schema(self.schema.clone())
            .task_types(["bench_sleep"])
            .result_retention(Duration::from_secs(24 * 3600))
            .build()?;
        let (retired, seconds) = self
            .run_worker_until(
                worker,
                |b| async move { Ok(b.partitions().await? < partitions) },
            )
            .await?;
        if !retired {
            return Err("the retention retired no partition within 60 s".into());
        }
        let dead_after = self.dead_results().await?;
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sk_bench.sk_task_results_t WHERE task_type = 'old_job'",
        )
        .fetch_one(&self.pool)
        .await?;
        let dropped = partitions - self.partitions().await?;
        FIGURES.note(
            "retention_dropped_partitions".into(),
            dropped as f64,
            "partitions",
        );
        FIGURES.note("retention_seconds".into(), seconds, "s");
        FIGURES.note("retention_history_left".into(), left as f64, "rows");
        FIGURES.note(
            "retention_dead_tuples_before".into(),
            dead_before as f64,
            "tuples",
        );
        FIGURES.note(
            "retention_dead_tuples_after".into(),
            dead_after as f64,
            "tuples",
        );
        Ok(rate)
    }

    /// The dead tuples in every partition of the results table, read by `pgstattuple`
    /// (exact, where the statistics lag).
    async fn dead_results(&self) -> Result<i64, BoxError> {
        Ok(sqlx::query_scalar(
            "SELECT coalesce(sum(s.dead_tuple_count), 0)::int8
             FROM pg_inherits i, LATERAL pgstattuple(i.inhrelid) s
             WHERE i.inhparent = 'sk_bench.sk_task_results_t'::regclass",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The results table's partitions (the default one included).
    async fn partitions(&self) -> Result<i64, BoxError> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'sk_bench.sk_task_results_t'::regclass",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Runs `worker` until `done` says so (checked every 50 ms, for at most 60 s), then
    /// stops it: whether `done` came, and the seconds it took.
    async fn run_worker_until<'a, F, Fut>(
        &'a self,
        worker: Worker,
        done: F,
    ) -> Result<(bool, f64), BoxError>
    where
        F: Fn(&'a Bench) -> Fut,
        Fut: std::future::Future<Output = Result<bool, BoxError>>,
    {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let start = Instant::now();
        let running = tokio::spawn(worker.run_until(async move {
            let _ = stop_rx.await;
        }));
        let mut came = false;
        while start.elapsed() < Duration::from_secs(60) {
            if done(self).await? {
                came = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let seconds = start.elapsed().as_secs_f64();
        let _ = stop_tx.send(());
        running.await??;
        Ok((came, seconds))
    }

    /// `burn_down` of no-op jobs with a rate limit on their queue.
    async fn burn_down_rated(
        &self,
        n: u64,
        concurrency: usize,
        limit: RateLimit,
    ) -> Result<f64, BoxError> {
        let client = Client::new(self.pool.clone()).schema(self.schema.clone());
        client.set_rate_limit(QUEUE_OF_NOOP, Some(limit)).await?;
        let rate = self.burn_down(n, concurrency, Load::Noop).await;
        client.set_rate_limit(QUEUE_OF_NOOP, None).await?;
        rate
    }

    async fn burn_down(&self, n: u64, concurrency: usize, load: Load) -> Result<f64, BoxError> {
        let schema = &self.schema;
        match load {
            Load::Sleep => {
                enqueue_chunks(&self.pool, n, |k| {
                    Enqueue::new(BenchSleep::new(k)).with_schema(schema)
                })
                .await?
            }
            Load::Noop | Load::Layered | Load::Forgotten | Load::Walled => {
                enqueue_chunks(&self.pool, n, |k| {
                    Enqueue::new(BenchNoop::new(k)).with_schema(schema)
                })
                .await?
            }
            Load::Fair => {
                enqueue_chunks(&self.pool, n, |k| {
                    Enqueue::new(BenchNoop::new(k))
                        .with_schema(schema)
                        .with_tenant(format!("tenant{}", k % 8))
                })
                .await?
            }
            Load::Flaky => {
                enqueue_chunks(&self.pool, n, |k| {
                    Enqueue::new(BenchFlaky::new(k)).with_schema(schema)
                })
                .await?
            }
            Load::Progress => {
                enqueue_chunks(&self.pool, n, |k| {
                    Enqueue::new(BenchProgress::new(k)).with_schema(schema)
                })
                .await?
            }
            Load::Batched => {
                sk_runtime::Batch::new()
                    .add_all((0..n).map(BenchNoop::new))
                    .with_schema(schema)
                    .enqueue(&self.pool)
                    .await?;
            }
        }
        if self.args.old_results > 0 && load == Load::Noop {
            // History: finished jobs of earlier days, as a long-running system keeps them.
            sqlx::query(
                "INSERT INTO sk_bench.sk_task_results_t (task_id, task_type, task_source, task_queue, task_status,
                    task_priority, task_processing_time_milliseconds, task_posted_at_ts,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                    task_processing_finalized_at_ts)
                 SELECT gen_random_uuid(), 'old_job', 'app', 'default', 3, 0, 1, t, t, t, t
                 FROM generate_series(1, $1) g,
                      LATERAL (SELECT now() - interval '2 days' + g * interval '10 ms' AS t) x",
            )
            .bind(self.args.old_results as i64)
            .execute(&self.pool)
            .await?;
        }
        sqlx::query("VACUUM ANALYZE sk_bench.sk_tasks_queue_t")
            .execute(&self.pool)
            .await?;
        sqlx::query("VACUUM ANALYZE sk_bench.sk_task_results_t")
            .execute(&self.pool)
            .await?;
        let task_type = match load {
            Load::Noop
            | Load::Layered
            | Load::Fair
            | Load::Batched
            | Load::Forgotten
            | Load::Walled => "bench_noop",
            Load::Sleep => "bench_sleep",
            Load::Flaky => "bench_flaky",
            Load::Progress => "bench_progress",
        };
        let probe = self.probe().await?;
        let mut worker = Worker::builder(self.pool.clone())
            .schema(self.schema.clone())
            .task_types([task_type])
            .concurrency(concurrency);
        if load == Load::Fair {
            worker = worker.fair(QUEUE_OF_NOOP);
        }
        if load == Load::Layered {
            worker = worker.layer(Pass);
        }
        if load == Load::Forgotten {
            worker = worker.result_retention(Duration::ZERO);
        }
        let worker = worker.build()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(worker.run_until(async move {
            let _ = stop_rx.await;
        }));
        // A walled run is timed from the first lease on (not the worker's start).
        let walled = matches!(load, Load::Forgotten | Load::Walled);
        if walled {
            let leased = "SELECT EXISTS (SELECT 1 FROM sk_bench.sk_tasks_queue_t WHERE task_locked_by IS NOT NULL)";
            while !sqlx::query_scalar::<_, bool>(leased)
                .fetch_one(&self.pool)
                .await?
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let started = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(if walled { 5 } else { 20 })).await;
            // The measured jobs are those of priority 0 (`burn_down_history` puts others
            // behind them); the leading column of the dequeue index finds them.
            let left: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM sk_bench.sk_tasks_queue_t WHERE task_priority = 0)",
            )
            .fetch_one(&self.pool)
            .await?;
            if !left {
                break;
            }
        }
        let took = started.elapsed().as_secs_f64();
        let _ = stop_tx.send(());
        running.await??;
        self.probe_end(probe, n).await?;
        if walled {
            let recorded: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM sk_bench.sk_task_results_t WHERE task_type = 'bench_noop'",
            )
            .fetch_one(&self.pool)
            .await?;
            let expected = if load == Load::Forgotten { 0 } else { n as i64 };
            if recorded != expected {
                return Err(
                    format!("burn-down recorded {recorded} results, not {expected}").into(),
                );
            }
            return Ok(n as f64 / took);
        }
        let (done, seconds): (i64, f64) = sqlx::query_as(
            "SELECT count(*), extract(epoch FROM max(task_processing_finalized_at_ts) - min(task_first_processing_attempted_at_ts))::float8
             FROM sk_bench.sk_task_results_t
             WHERE task_status = 3 AND task_type <> 'old_job' AND task_priority = 0",
        )
        .fetch_one(&self.pool)
        .await?;
        if done != n as i64 {
            return Err(format!("burn-down finished {done} of {n} jobs").into());
        }
        Ok(n as f64 / seconds)
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
