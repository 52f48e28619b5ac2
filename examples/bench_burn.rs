//! The PostgreSQL bench's burn-downs: a backlog of jobs run by a worker in each of the
//! ways `run` measures (limits, tracing, layers, history, rates), and the worker runs
//! they share.

use super::*;

impl Bench {
    /// Fills the queue with `n` jobs (bulk, untimed), then times one worker burning them.
    pub(super) async fn backlog_start(&self, n: u64, concurrency: usize) -> Result<f64, BoxError> {
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

    pub(super) async fn burn_down_global_limit(
        &self,
        n: u64,
        concurrency: usize,
    ) -> Result<f64, BoxError> {
        let client = Client::new(self.pool.clone()).schema(self.schema.clone());
        client
            .set_global_limit("default", Some(u32::try_from(concurrency)?))
            .await?;
        let result = self.burn_down(n, concurrency, Load::Noop).await;
        client.set_global_limit("default", None).await?;
        result
    }

    pub(super) async fn burn_down_tenant_limit(
        &self,
        n: u64,
        concurrency: usize,
    ) -> Result<f64, BoxError> {
        let client = Client::new(self.pool.clone()).schema(self.schema.clone());
        client
            .set_tenant_limit(QUEUE_OF_NOOP, Some(u32::try_from(concurrency)?))
            .await?;
        let result = self.burn_down(n, concurrency, Load::Fair).await;
        client.set_tenant_limit(QUEUE_OF_NOOP, None).await?;
        result
    }

    pub(super) async fn burn_down_tenant_rate(
        &self,
        n: u64,
        concurrency: usize,
    ) -> Result<f64, BoxError> {
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
    pub(super) async fn burn_down_traced(
        &self,
        n: u64,
        concurrency: usize,
    ) -> Result<f64, BoxError> {
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
    pub(super) async fn burn_down_cpu(
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
    pub(super) async fn burn_down_history(
        &self,
        n: u64,
        concurrency: usize,
    ) -> Result<f64, BoxError> {
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
    pub(super) async fn dead_results(&self) -> Result<i64, BoxError> {
        Ok(sqlx::query_scalar(
            "SELECT coalesce(sum(s.dead_tuple_count), 0)::int8
             FROM pg_inherits i, LATERAL pgstattuple(i.inhrelid) s
             WHERE i.inhparent = 'sk_bench.sk_task_results_t'::regclass",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The results table's partitions (the default one included).
    pub(super) async fn partitions(&self) -> Result<i64, BoxError> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'sk_bench.sk_task_results_t'::regclass",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Runs `worker` until `done` says so (checked every 50 ms, for at most 60 s), then
    /// stops it: whether `done` came, and the seconds it took.
    pub(super) async fn run_worker_until<'a, F, Fut>(
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
    pub(super) async fn burn_down_rated(
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

    pub(super) async fn burn_down(
        &self,
        n: u64,
        concurrency: usize,
        load: Load,
    ) -> Result<f64, BoxError> {
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
}
