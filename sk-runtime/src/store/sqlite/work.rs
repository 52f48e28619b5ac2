//! The worker's pipeline on SQLite (the driver contract's `Work`): claims, outcomes, leases, ticks and upkeep.

use super::*;

impl SqliteStore {
    /// The claim's statement with `$1` to `$8` bound, asking for `limit` jobs.
    fn claim_query<'q>(
        &self,
        sql: &'q str,
        claim: &super::super::Claim<'q>,
        limit: i64,
    ) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        let list = |l: &[String]| serde_json::to_string(l).unwrap_or_default();
        sqlx::query(sql)
            .bind(ts(claim.now))
            .bind(list(claim.task_types))
            .bind(claim.queues.map(list))
            .bind(limit)
            .bind(ts(claim.lease_until))
            .bind(self.worker_id.clone())
            .bind(claim.tenants.map(list))
            .bind((!claim.paused.is_empty()).then(|| list(claim.paused)))
    }

    /// Leases up to `limit` of the jobs `claim` asks for by the statement `sql` (`claim`,
    /// or `claim_key` of one tenant), on a connection that holds this worker's turn to
    /// write: each with its lock handle. Candidates another writer leased between the
    /// claim's steps are claimed for again at once, until the claim has its limit or lost
    /// none.
    async fn claim_rows(
        &self,
        conn: &mut SqliteConnection,
        sql: &str,
        claim: &super::super::Claim<'_>,
        limit: i64,
    ) -> Result<Vec<(i64, ClaimedJob)>> {
        let mut jobs = Vec::new();
        let mut want = limit;
        while want > 0 {
            let rows = self
                .claim_query(sql, claim, want)
                .fetch_all(&mut *conn)
                .await?;
            let row = last_row(&rows, "the claim")?;
            let candidates: i64 = row.try_get(0)?;
            let leased = claimed(row.try_get(1)?)?;
            let n = leased.len() as i64;
            jobs.extend(leased);
            want -= n;
            if n == candidates {
                break;
            }
        }
        Ok(jobs)
    }

    /// How many more jobs of `queue` its global limit lets run at `now` (`None`: it has
    /// none), under the write lock.
    async fn cap_room(
        &self,
        conn: &mut SqliteConnection,
        queue: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT queue_global_limit - (SELECT count(*) FROM {} WHERE task_queue = $1
                AND task_locked_by IS NOT NULL AND task_locked_until_ts > $2)
             FROM {} WHERE queue_name = $1",
            self.schema.flat_table("tasks_queue_t"),
            self.schema.flat_table("queues_t")
        ))
        .bind(queue)
        .bind(ts(now))
        .fetch_optional(&mut *conn)
        .await?
        .flatten())
    }
}

/// A claim's jobs in the claim's order (the rows come in lock-handle order, and a job of
/// another claim round may come first).
fn in_order(mut jobs: Vec<(i64, ClaimedJob)>) -> Vec<ClaimedJob> {
    jobs.sort_by_key(|(handle, job)| (job.task_priority, *handle));
    jobs.into_iter().map(|(_, job)| job).collect()
}

impl fair::Steps for SqliteStore {
    type Conn = SqliteConnection;
    type Job = (i64, ClaimedJob);

    fair::dialect_steps!(Sqlite);

    /// Through the fair index, one statement for each tenant (`claim_key`).
    async fn take(
        &self,
        conn: &mut SqliteConnection,
        claim: &super::super::Claim<'_>,
        keys: &[String],
        each: i64,
    ) -> Result<Vec<(i64, ClaimedJob)>> {
        let mut jobs = Vec::new();
        for key in keys {
            let one = super::super::Claim {
                tenants: Some(std::slice::from_ref(key)),
                ..*claim
            };
            jobs.extend(
                self.claim_rows(conn, &self.sql().claim_key, &one, each)
                    .await?,
            );
        }
        Ok(jobs)
    }

    async fn rest(
        &self,
        conn: &mut SqliteConnection,
        claim: &super::super::Claim<'_>,
        limit: i64,
    ) -> Result<Vec<(i64, ClaimedJob)>> {
        let sql = if claim.untenanted {
            &self.sql().claim_untenanted
        } else {
            &self.sql().claim
        };
        self.claim_rows(conn, sql, claim, limit).await
    }
}

/// Whether a claim failed on a due row whose attempt its lease cannot count up (one
/// written past the table's checks: `task_attempt + 1` fails the check).
fn attempt_out_of_range(error: &Error) -> bool {
    error.to_string().contains("task_attempt_is_an_int4")
}

impl SqliteStore {
    /// Ends, fatal, the due rows whose attempt is out of the range sk counts attempts in,
    /// as the executor ends a row it cannot read: the claim's lease of such a row fails
    /// the table's check, and with it every claim that took the row, so no job ran. Its
    /// results row keeps what it can of the row (its priority and retry limit held to
    /// their range, metadata that is not JSON left out).
    async fn end_unleasable(&self, now: DateTime<Utc>) -> Result<()> {
        let (q, r) = (&self.sql().queue, &self.sql().results);
        let out =
            "task_locked_until_ts <= $1 AND task_attempt NOT BETWEEN -2147483648 AND 2147483646";
        let int4 = |column: &str| format!("max(-2147483648, min(2147483647, {column}))");
        let (priority, max_attempts) = (int4("task_priority"), int4("task_max_attempts"));
        let sql = format!(
            "INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_priority,
                task_posted_at_ts, task_tenant, task_correlation_id, task_metadata, task_status,
                task_error_count, task_last_error_type, task_last_error_message, task_last_error,
                task_last_error_is_recoverable, task_processing_finalized_at_ts, task_payload,
                task_max_attempts, task_timeout_ms)
             SELECT task_id, task_type, task_source, task_queue, {priority}, task_posted_at_ts,
                task_tenant, task_correlation_id,
                CASE WHEN json_valid(task_metadata) THEN task_metadata END, {FATAL}, 1, 'payload',
                $2 || task_attempt || $3, 'payload: ' || $2 || task_attempt || $3, 0, $1,
                task_payload, {max_attempts}, task_timeout_ms
             FROM {q} WHERE {out}
             ON CONFLICT (task_id) DO UPDATE SET task_status = excluded.task_status,
                task_error_count = task_error_count + 1,
                task_last_error_type = excluded.task_last_error_type,
                task_last_error_message = excluded.task_last_error_message,
                task_last_error = excluded.task_last_error,
                task_last_error_is_recoverable = 0,
                task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
                task_payload = excluded.task_payload;
             DELETE FROM {q} WHERE {out}",
            FATAL = crate::model::status::FATAL,
        );
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        sqlx::query(&sql)
            .bind(ts(now))
            .bind("sk cannot read the job's queue row: its task_attempt ")
            .bind(" is out of the range sk counts attempts in")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::error!("sk: ended, fatal, the due jobs whose task_attempt is out of range (written past the queue table's checks)");
        Ok(())
    }

    async fn claim_now(&self, claim: &super::super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        let capped = match claim.queues {
            // A fair claim of a limited queue takes the room first, in one transaction,
            // as does a claim of a queue with a limit per tenant.
            Some([_]) if claim.capped && claim.fair.is_some() || claim.tenant_capped => {
                return Ok(self.claim_rated(claim, &[]).await?.jobs);
            }
            Some([queue]) if claim.capped => Some(queue),
            _ => None,
        };
        let (_turn, mut conn) = self.writing().await?;
        let jobs = match capped {
            Some(queue) => {
                let rows = self
                    .claim_query(&self.sql().claim_capped, claim, claim.limit)
                    .bind(queue)
                    .fetch_all(&mut *conn)
                    .await?;
                let mut jobs = Vec::new();
                for row in rows {
                    let handle: i64 = row.try_get("task_lock_handle_id")?;
                    match super::super::claimed_row(&row, 0) {
                        Ok(job) => jobs.push((handle, job)),
                        Err(e) => super::super::unleasable(&e),
                    }
                }
                jobs
            }
            None => fair::claim(self, &mut *conn, claim, claim.limit).await?,
        };
        drop((_turn, conn));
        Ok(in_order(jobs))
    }

    /// A rate-limited claim, in one write transaction: its queue's global limit's room,
    /// each rate limit's, the claim, and the starts recorded.
    async fn claim_rated_now(
        &self,
        claim: &super::super::Claim<'_>,
        keys: &[(&'static str, &str)],
    ) -> Result<RatedClaim> {
        let capped = rates::capped_queue(claim)?;
        let per_tenant = tenants::tenant_capped_queue(claim)?;
        let asked = std::time::Instant::now();
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        // The claim takes place once it holds the write lock: its time moves on by the
        // wait. At the time it was asked, a claim that waited behind a later one would
        // count its window in a log that claim had pruned to its own window, see room
        // that was used, and record starts (and its jobs' start times) in the past: one
        // window then held more starts than the limit. (Every claim here moves on: the
        // jobs' claim time is this one, `RatedClaim::at`.)
        let claim = &rates::after_locks(claim, asked, true);
        let now = claim.now;
        let mut limit = claim.limit;
        if let Some(queue) = capped {
            if let Some(room) = self.cap_room(&mut tx, queue, now).await? {
                limit = limit.min(room);
            }
        }
        let mut room = match per_tenant {
            Some(queue) => tenants::room::<Sqlite>(&mut tx, &self.schema, queue, now).await?,
            None => None,
        };
        let taken = rates::take_all::<Sqlite>(&mut tx, &self.schema, keys, now).await?;
        limit = taken.room(limit);
        let served = if limit > 0 {
            fair::claim_within(self, &mut *tx, claim, limit, room.as_mut()).await?
        } else {
            fair::Served::none()
        };
        let opens_at = taken
            .spend::<Sqlite>(&mut tx, &self.schema, served.jobs.len(), now)
            .await?;
        tx.commit().await?;
        drop((_turn, conn));
        Ok(RatedClaim {
            jobs: in_order(served.jobs),
            at: now,
            opens_at: rates::later(opens_at, served.opens_at),
            turn: served.turn,
            held_tenants: served.passed,
        })
    }
}

impl Work for SqliteStore {
    async fn claim(&self, claim: &super::super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        match self.claim_now(claim).await {
            Err(e) if attempt_out_of_range(&e) => {
                self.end_unleasable(claim.now).await?;
                self.claim_now(claim).await
            }
            claimed => claimed,
        }
    }

    async fn claim_rated(
        &self,
        claim: &super::super::Claim<'_>,
        keys: &[(&'static str, &str)],
    ) -> Result<RatedClaim> {
        match self.claim_rated_now(claim, keys).await {
            Err(e) if attempt_out_of_range(&e) => {
                self.end_unleasable(claim.now).await?;
                self.claim_rated_now(claim, keys).await
            }
            claimed => claimed,
        }
    }

    /// Finalizes successful runs (fenced); the ids whose lease was still held.
    async fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        let (held, posted) = self.complete_on(&mut tx, done, now).await?;
        tx.commit().await?;
        drop((_turn, conn));
        self.checkpoint(held.len());
        if posted {
            wake();
        }
        Ok(held)
    }

    /// The outputs of job `id`'s dependencies, in order.
    async fn inputs(&self, id: Uuid) -> Result<Vec<Option<Option<String>>>> {
        let mut conn = self.pool.acquire().await?;
        flow::inputs(&mut conn, &self.schema, id).await
    }

    /// Records failed runs (retry or final) in one transaction, a few statements for the
    /// whole batch; per failure, false when its lease was lost (fenced).
    async fn fail(&self, failures: &[Failure], now: DateTime<Utc>) -> Result<Vec<bool>> {
        if failures.is_empty() {
            return Ok(Vec::new());
        }
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        let held = self.fail_on(&mut tx, failures, now).await?;
        tx.commit().await?;
        if !held.is_empty() {
            wake();
        }
        Ok(failures
            .iter()
            .map(|f| held.contains(&f.lease.id))
            .collect())
    }

    /// Releases leases at once (graceful stop), without using up an attempt.
    async fn give_back(&self, leases: &[Lease], now: DateTime<Utc>) -> Result<u64> {
        let (_turn, mut conn) = self.writing().await?;
        let n = sqlx::query(&self.sql().give_back)
            .bind(ts(now))
            .bind(lease_list(leases))
            .bind(&self.worker_id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        wake();
        Ok(n)
    }

    /// Extends the leases still held; their ids (a missing one was lost).
    async fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let (_turn, mut conn) = self.writing().await?;
        Ok(sqlx::query_scalar(&self.sql().extend)
            .bind(ts(until))
            .bind(lease_list(leases))
            .bind(&self.worker_id)
            .fetch_all(&mut *conn)
            .await?)
    }

    /// Posts one job with a unique key of mode `mode` (the periodic jobs' first runs).
    async fn enqueue_unique(
        &self,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> Result<(Uuid, bool, bool)> {
        enqueue_unique(&self.pool, &self.schema, job, mode, now).await
    }

    /// Posts a cron tick once across workers (its id comes from its key); with
    /// `live_key`, only while no earlier tick holding that key is live; with `stored`, only
    /// while that stored schedule exists as it was read. False if it was not posted.
    async fn enqueue_tick(
        &self,
        job: NewJob,
        live_key: Option<&str>,
        stored: Option<(&str, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        if let Some((name, updated_at)) = stored {
            let exists: Option<i32> = sqlx::query_scalar(&format!(
                "SELECT 1 FROM {} WHERE schedule_name = $1 AND schedule_updated_at_ts = $2",
                self.schema.flat_table("schedules_t")
            ))
            .bind(name)
            .bind(ts(updated_at))
            .fetch_optional(&mut *tx)
            .await?;
            if exists.is_none() {
                return Ok(false);
            }
        }
        let results = &self.sql().results;
        let queue = &self.sql().queue;
        let seen: Option<i32> =
            sqlx::query_scalar(&format!("SELECT 1 FROM {results} WHERE task_id = $1"))
                .bind(job.id)
                .fetch_optional(&mut *tx)
                .await?;
        if seen.is_some() {
            return Ok(false);
        }
        if let Some(key) = live_key {
            let live: Option<i32> =
                sqlx::query_scalar(&format!("SELECT 1 FROM {queue} WHERE task_unique_key = $1"))
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
            if live.is_some() {
                return Ok(false);
            }
        }
        // The results row keeps the tick's key; the queue row holds the live key (mode
        // skip) or none.
        sqlx::query(&format!(
            "INSERT INTO {results} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                task_unique_key, task_posted_at_ts)
             VALUES ($1, $2, $3, $4, 1, $5, $6, $7)"
        ))
        .bind(job.id)
        .bind(&*job.task_type)
        .bind(&job.source)
        .bind(&job.queue)
        .bind(job.priority)
        .bind(&job.unique_key)
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        let mut job = job;
        job.unique_key = live_key.map(str::to_owned);
        let mode = live_key.map(|_| crate::model::UniqueMode::Skip as i16);
        bind_new!(sqlx::query(&self.sql().again), job, now, mode)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        wake();
        Ok(true)
    }

    async fn stored_schedules(&self) -> Result<Vec<ScheduleRow>> {
        Admin::schedule_list(&self.pool, &self.schema).await
    }

    async fn migrate(&self) -> Result<()> {
        Admin::migrate(&self.pool, &self.schema).await
    }

    /// SQLite has no partitions: results are pruned row by row (`retire_partitions`).
    async fn ensure_partitions(
        &self,
        _now: DateTime<Utc>,
        _span: crate::store::PartitionSpan,
    ) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Deletes the results of jobs finished before `cutoff`, a thousand rows per
    /// statement (each a short write, so workers' claims go between them). The archive
    /// schema does not apply (`WorkerBuilder::build` refuses it on SQLite).
    async fn retire_partitions(
        &self,
        cutoff: DateTime<Utc>,
        _archive: Option<&str>,
        _within: bool,
        stopping: &tokio_util::sync::CancellationToken,
    ) -> Result<Retired> {
        let results = &self.sql().results;
        let statement = format!(
            "DELETE FROM {results} WHERE task_id IN (
                SELECT task_id FROM {results}
                WHERE task_processing_finalized_at_ts IS NOT NULL AND task_processing_finalized_at_ts < $1
                  AND task_id NOT IN (SELECT task_id FROM {})
                LIMIT 1000)",
            self.sql().queue
        );
        let mut retired = Retired::default();
        while !stopping.is_cancelled() {
            let n = sqlx::query(&statement)
                .bind(ts(cutoff))
                .execute(&mut *self.writing().await?.1)
                .await?
                .rows_affected();
            retired.rows += n;
            if n < 1000 {
                break;
            }
        }
        Ok(retired)
    }

    /// SQLite reuses the pages of deleted rows without a vacuum: nothing to watch.
    async fn table_health(&self) -> Result<Vec<super::super::TableHealth>> {
        Ok(Vec::new())
    }

    async fn vacuum(&self, _table: &str) -> Result<bool> {
        Ok(false)
    }

    async fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()> {
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        for (id, value) in metrics {
            sqlx::query(&self.sql().metrics)
                .bind(&self.worker_id)
                .bind(id)
                .bind(value)
                .bind(ts(now))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Opens the file outside the pool, saying why it cannot.
    async fn probe(&self) -> std::result::Result<(), ProbeFailure> {
        let options = self.pool.connect_options();
        match SqliteConnection::connect_with(&options).await {
            Ok(conn) => {
                let _ = conn.close().await;
                Ok(())
            }
            Err(e) => {
                let busy =
                    matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("5"));
                let error = Error::Connect {
                    address: address(&options),
                    cause: e.to_string(),
                };
                Err(if busy {
                    ProbeFailure::Transient(error)
                } else {
                    ProbeFailure::Permanent(error)
                })
            }
        }
    }
}
