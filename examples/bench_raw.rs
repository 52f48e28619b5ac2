//! The bench's raw baselines on PostgreSQL, measured beside sk in the same run:
//! - `raw_*`: plain SQL on a copy of sk's queue table (`LIKE sk_tasks_queue_t INCLUDING
//!   ALL`, every index of sk's): sk's code over sk's schema;
//! - `min_*`: plain SQL on the minimal queue table below, the physical limit of a
//!   PostgreSQL queue: what sk's schema costs on top.
//!
//! ```sql
//! CREATE TABLE job (id bigserial PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL DEFAULT '{}',
//!   priority int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
//!   state smallint NOT NULL DEFAULT 0, attempts int NOT NULL DEFAULT 0, locked_until timestamptz);
//! CREATE INDEX job_dequeue_idx ON job (priority, run_at, id) WHERE state = 0;
//! ```

use std::time::Instant;

use super::{Bench, BoxError};

/// The minimal queue table, in schema `sk_bench_min`.
const MIN_TABLE: &str = "CREATE SCHEMA sk_bench_min;
    CREATE TABLE sk_bench_min.job (id bigserial PRIMARY KEY, kind text NOT NULL,
        payload jsonb NOT NULL DEFAULT '{}', priority int NOT NULL DEFAULT 0,
        run_at timestamptz NOT NULL DEFAULT now(), state smallint NOT NULL DEFAULT 0,
        attempts int NOT NULL DEFAULT 0, locked_until timestamptz);
    CREATE INDEX job_dequeue_idx ON sk_bench_min.job (priority, run_at, id) WHERE state = 0;";

/// Clients of the minimal burn-down, as many as sk's worker runs jobs at once in
/// `burn_down_c16`.
const MIN_CLIENTS: usize = 16;

impl Bench {
    /// The baselines' tables, empty: a copy of sk's queue table (after sk's migration)
    /// and the minimal one.
    pub(super) async fn reset_raw(&self) -> Result<(), BoxError> {
        for schema in ["sk_bench_raw", "sk_bench_min"] {
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&self.pool)
                .await?;
        }
        sqlx::raw_sql(
            "CREATE SCHEMA sk_bench_raw;
             CREATE TABLE sk_bench_raw.queue (LIKE sk_bench.sk_tasks_queue_t INCLUDING ALL);",
        )
        .execute(&self.pool)
        .await?;
        sqlx::raw_sql(MIN_TABLE).execute(&self.pool).await?;
        Ok(())
    }

    pub(super) async fn raw_insert_single(&self, n: u64) -> Result<f64, BoxError> {
        let start = Instant::now();
        for i in 0..n {
            sqlx::query(
                "INSERT INTO sk_bench_raw.queue (task_id, task_type, task_source, task_payload, task_priority,
                    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
                 VALUES ($1, 'bench_noop', 'app', $2::jsonb, 0, $3, $3, 'default', 25)",
            )
            .bind(uuid::Uuid::now_v7())
            .bind(format!("{{\"n\":{i}}}"))
            .bind(chrono::Utc::now())
            .execute(&self.pool)
            .await?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    pub(super) async fn raw_insert_bulk(&self, n: u64) -> Result<f64, BoxError> {
        let start = Instant::now();
        let mut i = 0;
        while i < n {
            let end = (i + 10_000).min(n);
            let ids: Vec<uuid::Uuid> = (i..end).map(|_| uuid::Uuid::now_v7()).collect();
            let payloads: Vec<String> = (i..end).map(|k| format!("{{\"n\":{k}}}")).collect();
            sqlx::query(
                "INSERT INTO sk_bench_raw.queue (task_id, task_type, task_source, task_payload, task_priority,
                    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
                 SELECT id, 'bench_noop', 'app', p::jsonb, 0, $3, $3, 'default', 25
                 FROM unnest($1::uuid[], $2::text[]) AS i(id, p)",
            )
            .bind(ids)
            .bind(payloads)
            .bind(chrono::Utc::now())
            .execute(&self.pool)
            .await?;
            i = end;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// The rows of `raw_insert_bulk` through COPY (text format), 10,000 per statement.
    pub(super) async fn raw_copy_bulk(&self, n: u64) -> Result<f64, BoxError> {
        use std::fmt::Write as _;
        let start = Instant::now();
        let mut conn = self.pool.acquire().await?;
        let mut i = 0;
        while i < n {
            let end = (i + 10_000).min(n);
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            let mut rows = String::with_capacity(10_000 * 128);
            for k in i..end {
                let _ = writeln!(
                    rows,
                    "{}\tbench_noop\tapp\t{{\"n\":{k}}}\t0\t{now}\t{now}\tdefault\t25",
                    uuid::Uuid::now_v7()
                );
            }
            let mut copy = conn
                .copy_in_raw(
                    "COPY sk_bench_raw.queue (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts) FROM STDIN",
                )
                .await?;
            copy.send(rows.into_bytes()).await?;
            copy.finish().await?;
            i = end;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// A backlog of `n` rows in the plain table, vacuumed and analyzed.
    pub(super) async fn raw_backlog(&self, n: u64) -> Result<(), BoxError> {
        self.raw_insert_bulk(n).await?;
        sqlx::query("VACUUM ANALYZE sk_bench_raw.queue")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(super) async fn raw_burn_down(&self, n: u64) -> Result<f64, BoxError> {
        self.raw_backlog(n).await?;
        let probe = self.probe().await?;
        let start = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let pool = self.pool.clone();
            clients.push(tokio::spawn(async move {
                let mut done = 0u64;
                loop {
                    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
                        "WITH next AS (
                            SELECT task_id FROM sk_bench_raw.queue WHERE task_locked_until_ts <= now()
                            ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
                            LIMIT 100 FOR UPDATE SKIP LOCKED)
                         UPDATE sk_bench_raw.queue q SET task_locked_until_ts = now() + interval '30 seconds',
                            task_attempt = q.task_attempt + 1
                         FROM next WHERE q.task_id = next.task_id RETURNING q.task_id",
                    )
                    .fetch_all(&pool)
                    .await?;
                    if ids.is_empty() {
                        return Ok::<u64, sqlx::Error>(done);
                    }
                    done += ids.len() as u64;
                    sqlx::query("DELETE FROM sk_bench_raw.queue WHERE task_id = ANY($1)").bind(ids).execute(&pool).await?;
                }
            }));
        }
        let mut done = 0;
        for c in clients {
            done += c.await??;
        }
        if done != n {
            return Err(format!("raw burn-down finished {done} of {n}").into());
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        self.probe_end(probe, n).await?;
        Ok(rate)
    }

    /// One job per round trip: a backlog of `n` rows in the plain table taken by one
    /// client, one row per statement (claimed with SKIP LOCKED and deleted in one
    /// statement, one commit each): what a worker that fetched one job at a time could at
    /// best do.
    pub(super) async fn raw_one_per_round_trip(&self, n: u64) -> Result<f64, BoxError> {
        self.raw_backlog(n).await?;
        let start = Instant::now();
        let mut done = 0u64;
        loop {
            let id: Option<uuid::Uuid> = sqlx::query_scalar(
                "DELETE FROM sk_bench_raw.queue WHERE task_id = (
                    SELECT task_id FROM sk_bench_raw.queue WHERE task_locked_until_ts <= now()
                    ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
                    LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING task_id",
            )
            .fetch_optional(&self.pool)
            .await?;
            if id.is_none() {
                break;
            }
            done += 1;
        }
        if done != n {
            return Err(format!("one-per-round-trip burn-down finished {done} of {n}").into());
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// One plain INSERT per transaction into the minimal table, one client.
    pub(super) async fn min_insert_single(&self, n: u64) -> Result<f64, BoxError> {
        let start = Instant::now();
        for i in 0..n {
            sqlx::query(
                "INSERT INTO sk_bench_min.job (kind, payload) VALUES ('bench_noop', $1::jsonb)",
            )
            .bind(format!("{{\"n\":{i}}}"))
            .execute(&self.pool)
            .await?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// INSERT ... SELECT FROM unnest into the minimal table, 1,000 rows a statement.
    pub(super) async fn min_insert_bulk(&self, n: u64) -> Result<f64, BoxError> {
        let start = Instant::now();
        let mut i = 0;
        while i < n {
            let end = (i + 1_000).min(n);
            let payloads: Vec<String> = (i..end).map(|k| format!("{{\"n\":{k}}}")).collect();
            sqlx::query(
                "INSERT INTO sk_bench_min.job (kind, payload)
                 SELECT 'bench_noop', p::jsonb FROM unnest($1::text[]) AS i(p)",
            )
            .bind(payloads)
            .execute(&self.pool)
            .await?;
            i = end;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// COPY (text format) into the minimal table, 10,000 rows a statement.
    pub(super) async fn min_copy_bulk(&self, n: u64) -> Result<f64, BoxError> {
        use std::fmt::Write as _;
        let start = Instant::now();
        let mut conn = self.pool.acquire().await?;
        let mut i = 0;
        while i < n {
            let end = (i + 10_000).min(n);
            let mut rows = String::with_capacity(10_000 * 24);
            for k in i..end {
                let _ = writeln!(rows, "bench_noop\t{{\"n\":{k}}}");
            }
            let mut copy = conn
                .copy_in_raw("COPY sk_bench_min.job (kind, payload) FROM STDIN")
                .await?;
            copy.send(rows.into_bytes()).await?;
            copy.finish().await?;
            i = end;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// A backlog of `n` rows in the minimal table, burned down by 16 clients each looping
    /// BEGIN; SELECT 100 ids FOR UPDATE SKIP LOCKED; DELETE them; COMMIT. Notes the
    /// server's CPU and the write-ahead log per job.
    pub(super) async fn min_burn_down(&self, n: u64) -> Result<f64, BoxError> {
        self.min_copy_bulk(n).await?;
        sqlx::query("VACUUM ANALYZE sk_bench_min.job")
            .execute(&self.pool)
            .await?;
        let probe = self.probe().await?;
        let start = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..MIN_CLIENTS {
            let pool = self.pool.clone();
            clients.push(tokio::spawn(async move {
                let mut done = 0u64;
                loop {
                    let mut tx = pool.begin().await?;
                    let ids: Vec<i64> = sqlx::query_scalar(
                        "SELECT id FROM sk_bench_min.job WHERE state = 0 AND run_at <= now()
                         ORDER BY priority, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED",
                    )
                    .fetch_all(&mut *tx)
                    .await?;
                    if ids.is_empty() {
                        tx.commit().await?;
                        return Ok::<u64, sqlx::Error>(done);
                    }
                    done += ids.len() as u64;
                    sqlx::query("DELETE FROM sk_bench_min.job WHERE id = ANY($1)")
                        .bind(ids)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                }
            }));
        }
        let mut done = 0;
        for c in clients {
            done += c.await??;
        }
        if done != n {
            return Err(format!("minimal burn-down finished {done} of {n}").into());
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        self.probe_end(probe, n).await?;
        Ok(rate)
    }
}
