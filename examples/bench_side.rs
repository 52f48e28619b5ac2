//! What the SQLite and MySQL benches run alike on their own pool: sk's enqueues and
//! burn-downs, and the minimal table's inserts. A backend gives what differs (`Side`):
//! its cost counters, its bind placeholder and the few reads a burn-down makes.

use std::future::Future;
use std::time::{Duration, Instant};

use sk_runtime::{Enqueue, Worker};
use sqlx::Pool;

use super::figures::{Cost, FIGURES};
use super::{BenchFlaky, BenchNoop, BoxError, Load};

/// A backend of the side benches.
pub(super) trait Side: sk_runtime::Backend
where
    Pool<Self>: Into<sk_runtime::Pool>,
{
    /// The placeholder of a statement's first parameter (`$1`, `?`).
    const PARAM: &'static str;

    /// The database's CPU time and log bytes so far.
    fn cost(pool: &Pool<Self>) -> impl Future<Output = Result<Cost, BoxError>> + Send;

    /// The value of `sql`, a count (or an `EXISTS`, 0 or 1).
    fn count(pool: &Pool<Self>, sql: &str) -> impl Future<Output = Result<i64, BoxError>> + Send;

    /// The successes in the results table, and the seconds from the first claim to the
    /// last result.
    fn span(pool: &Pool<Self>) -> impl Future<Output = Result<(i64, f64), BoxError>> + Send;

    /// `sql` run with `text` bound to its one parameter.
    fn run_with(
        pool: &Pool<Self>,
        sql: &str,
        text: String,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Rows `from..to` inserted into the minimal table in one multi-row `INSERT`.
    fn insert_min(
        pool: &Pool<Self>,
        from: u64,
        to: u64,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// The `Side` methods whose statements and calls are the same on both backends, for a
/// backend's pool type (`SPAN`, `DateTime` and `Utc` in scope where it is used).
macro_rules! same_on_both {
    ($pool:ty) => {
        async fn count(pool: &$pool, sql: &str) -> Result<i64, BoxError> {
            Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
        }

        async fn span(pool: &$pool) -> Result<(i64, f64), BoxError> {
            let (done, first, last): (i64, DateTime<Utc>, DateTime<Utc>) =
                sqlx::query_as(SPAN).fetch_one(pool).await?;
            Ok((done, (last - first).as_seconds_f64()))
        }

        async fn run_with(pool: &$pool, sql: &str, text: String) -> Result<(), BoxError> {
            sqlx::query(sql).bind(text).execute(pool).await?;
            Ok(())
        }

        async fn insert_min(pool: &$pool, from: u64, to: u64) -> Result<(), BoxError> {
            let mut query = sqlx::QueryBuilder::new("INSERT INTO min_job (kind, payload) ");
            query.push_values(from..to, |mut row, k| {
                row.push("'bench_noop'").push_bind(format!("{{\"n\":{k}}}"));
            });
            query.build().execute(pool).await?;
            Ok(())
        }
    };
}
pub(super) use same_on_both;

/// One job per statement (one commit each).
pub(super) async fn enqueue_single<DB: Side>(pool: Pool<DB>, n: u64) -> Result<f64, BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    let start = Instant::now();
    for i in 0..n {
        BenchNoop::new(i).enqueue(&pool).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

pub(super) async fn enqueue_bulk<DB: Side>(pool: Pool<DB>, n: u64) -> Result<f64, BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    let start = Instant::now();
    fill(&pool, n).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// `n` no-op jobs, 10,000 a call.
async fn fill<DB: Side>(pool: &Pool<DB>, n: u64) -> Result<(), BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    super::enqueue_chunks(pool, n, |k| Enqueue::new(BenchNoop::new(k))).await
}

/// One plain INSERT per statement (one commit each) into the minimal table.
pub(super) async fn min_insert_single<DB: Side>(pool: Pool<DB>, n: u64) -> Result<f64, BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    let sql = format!(
        "INSERT INTO min_job (kind, payload) VALUES ('bench_noop', {})",
        DB::PARAM
    );
    let start = Instant::now();
    for i in 0..n {
        DB::run_with(&pool, &sql, format!("{{\"n\":{i}}}")).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Multi-row INSERTs into the minimal table, 1,000 rows a statement (one commit each).
pub(super) async fn min_insert_bulk<DB: Side>(pool: Pool<DB>, n: u64) -> Result<f64, BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    let start = Instant::now();
    min_fill(&pool, n).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

pub(super) async fn min_fill<DB: Side>(pool: &Pool<DB>, n: u64) -> Result<(), BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    let mut i = 0;
    while i < n {
        let end = (i + 1_000).min(n);
        DB::insert_min(pool, i, end).await?;
        i = end;
    }
    Ok(())
}

/// `burn_down` of no-op jobs with a rate limit on their queue that never binds (10^9 a
/// second): what the limit's claim costs.
pub(super) async fn burn_down_rated<DB: Side>(
    pool: Pool<DB>,
    n: u64,
    concurrency: usize,
) -> Result<f64, BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    let open = sk_runtime::RateLimit::new(1_000_000_000, Duration::from_secs(1))?;
    sk_runtime::Client::new(pool.clone())
        .set_rate_limit("default", Some(open))
        .await?;
    burn_down(pool, n, concurrency, Load::Noop).await
}

/// A backlog of `n` jobs burned by one worker at `concurrency`, timed from the first
/// claim to the last result as the PostgreSQL bench does (`Load::Forgotten` and
/// `Load::Walled` by the wall clock, from the first lease until the queue is empty).
/// `Load::Flaky`: jobs whose first run fails and whose retry (at once) succeeds;
/// `Load::Fair`: no-ops of 8 tenants in turn, claimed fairly across them.
pub(super) async fn burn_down<DB: Side>(
    pool: Pool<DB>,
    n: u64,
    concurrency: usize,
    load: Load,
) -> Result<f64, BoxError>
where
    Pool<DB>: Into<sk_runtime::Pool>,
{
    match load {
        Load::Flaky => {
            super::enqueue_chunks(&pool, n, |k| Enqueue::new(BenchFlaky::new(k))).await?;
        }
        Load::Fair => {
            super::enqueue_chunks(&pool, n, |k| {
                Enqueue::new(BenchNoop::new(k)).with_tenant(format!("tenant{}", k % 8))
            })
            .await?;
        }
        Load::Batched => {
            sk_runtime::Batch::new()
                .add_all((0..n).map(BenchNoop::new))
                .enqueue(&pool)
                .await?;
        }
        Load::Noop
        | Load::Layered
        | Load::Sleep
        | Load::Progress
        | Load::Forgotten
        | Load::Walled => fill(&pool, n).await?,
    }
    let mut worker = Worker::builder(pool.clone())
        .task_types(["bench_noop", "bench_flaky"])
        .concurrency(concurrency);
    if load == Load::Fair {
        worker = worker.fair("default");
    }
    if load == Load::Layered {
        worker = worker.layer(super::Pass);
    }
    if load == Load::Forgotten {
        worker = worker.result_retention(Duration::ZERO);
    }
    let worker = worker.build()?;
    let before = DB::cost(&pool).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));
    let walled = matches!(load, Load::Forgotten | Load::Walled);
    if walled {
        let leased =
            "SELECT EXISTS (SELECT 1 FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL)";
        while DB::count(&pool, leased).await? == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let started = Instant::now();
    // EXISTS, not count(*): a count reads the whole table, on the cores the worker and
    // the database measured here share.
    while DB::count(&pool, "SELECT EXISTS (SELECT 1 FROM sk_tasks_queue_t)").await? != 0 {
        tokio::time::sleep(Duration::from_millis(if walled { 5 } else { 20 })).await;
    }
    let took = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(());
    running.await??;
    FIGURES.note_cost(before, DB::cost(&pool).await?, n);
    if walled {
        let recorded = DB::count(&pool, "SELECT count(*) FROM sk_task_results_t").await?;
        let expected = if load == Load::Forgotten { 0 } else { n as i64 };
        if recorded != expected {
            return Err(format!("burn-down recorded {recorded} results, not {expected}").into());
        }
        return Ok(n as f64 / took);
    }
    let (done, seconds) = DB::span(&pool).await?;
    if done != n as i64 {
        return Err(format!("burn-down finished {done} of {n} jobs").into());
    }
    Ok(n as f64 / seconds)
}
