//! The worker's pipeline on MySQL/MariaDB (the driver contract's `Work`): claims, outcomes, leases, ticks and upkeep.

use super::*;

impl MySqlStore {
    /// A claim in the order of the queues (and tenants) it names.
    async fn claim_rows(
        &self,
        conn: &mut MySqlConnection,
        claim: &super::super::Claim<'_>,
        limit: i64,
    ) -> Result<Vec<ClaimedJob>> {
        let super::super::Claim {
            task_types,
            queues,
            tenants,
            paused,
            now,
            lease_until,
            ..
        } = *claim;
        let queue = &self.sql().queue;
        let worker = &self.worker_id;
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
                "SELECT task_lock_handle_id, task_id, CAST(task_type AS CHAR) AS task_type, task_payload,
                    task_attempt, task_max_attempts, task_priority, CAST(task_queue AS CHAR) AS task_queue,
                    task_posted_at_ts, CAST(task_tenant AS CHAR) AS task_tenant,
                    CAST(task_correlation_id AS CHAR) AS task_correlation_id, task_metadata,
                    IF(task_metadata IS NULL OR JSON_VALID(task_metadata), NULL, LEFT(task_metadata, 80))
                        AS unreadable_metadata,
                    task_timeout_ms, task_waiting_on, task_locked_by IS NOT NULL AS held
                 FROM {queue} WHERE task_locked_until_ts <= "
            ));
        query.push_bind(dt(now));
        if !paused.is_empty() {
            query.push(" AND task_queue NOT IN (");
            let mut items = query.separated(", ");
            for queue in paused {
                items.push_bind(queue);
            }
            query.push(")");
        }
        for (column, list) in [
            ("task_type", Some(task_types)),
            ("task_queue", queues),
            ("task_tenant", tenants),
        ] {
            let Some(list) = list else { continue };
            query.push(format!(" AND {column} IN ("));
            let mut items = query.separated(", ");
            for item in list {
                items.push_bind(item);
            }
            query.push(")");
        }
        if claim.untenanted {
            query.push(" AND task_tenant IS NULL");
        }
        query.push(" ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT ");
        query.push_bind(limit);
        query.push(" FOR UPDATE SKIP LOCKED");
        let rows = query.build().fetch_all(&mut *conn).await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut jobs = Vec::with_capacity(rows.len());
        let mut handles = Vec::with_capacity(rows.len());
        let mut expired = false;
        for row in &rows {
            // Each row on its own: one sk cannot read ends alone (a row of which
            // not even the lease can be read is not leased, and named in the log).
            let mut job = match super::super::claimed_row(row, 1) {
                Ok(job) => job,
                Err(e) => {
                    tracing::error!("sk: a due row whose id, attempt or task type cannot be read is left alone: {e}");
                    continue;
                }
            };
            // Metadata that is not JSON (the queue's column is text, which a producer
            // outside sk can fill with anything) would fail the results row's JSON
            // columns at the job's outcome, and with it the whole batch of outcomes: the
            // job ends alone instead, its metadata kept as a JSON string (`QUEUE_ROW`).
            if let Some(text) = row.try_get::<Option<String>, _>("unreadable_metadata")? {
                if job.unreadable.is_none() {
                    let reason = format!("its task_metadata is not JSON: {text:?}");
                    job = ClaimedJob::unreadable(
                        job.task_id,
                        job.task_type,
                        job.task_attempt,
                        reason,
                    );
                }
            }
            handles.push(row.try_get::<i64, _>("task_lock_handle_id")?);
            expired |= row.try_get::<bool, _>("held")?;
            jobs.push(job);
        }
        if handles.is_empty() {
            return Ok(jobs);
        }
        // The lost attempt is recorded first: the assignments after it change
        // what it reads.
        let lost = if expired {
            format!(
                    "task_lost_attempts = CASE WHEN task_locked_by IS NULL THEN task_lost_attempts
                        ELSE JSON_ARRAY_APPEND(coalesce(task_lost_attempts, '[]'), '$', JSON_OBJECT(
                            'attempt', task_attempt, 'worker', task_locked_by,
                            'started_at', DATE_FORMAT(task_claimed_at_ts, {SQL_TS}), 'ended_at', '{}',
                            'outcome', 'lost', 'kind', 'worker_lost', 'message',
                            'worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)',
                            'recoverable', true)) END, ",
                    ts(now)
                )
        } else {
            String::new()
        };
        let mut update = QueryBuilder::<MySql>::new(format!("UPDATE {queue} SET {lost}"));
        update
            .push("task_locked_until_ts = ")
            .push_bind(dt(lease_until))
            .push(", task_locked_by = ")
            .push_bind(worker)
            .push(", task_attempt = task_attempt + 1, task_claimed_at_ts = ")
            .push_bind(dt(now))
            .push(" WHERE task_lock_handle_id IN (");
        let mut list = update.separated(", ");
        for handle in handles {
            list.push_bind(handle);
        }
        update.push(")");
        update.build().execute(&mut *conn).await?;
        Ok(jobs)
    }

    /// Adds the fair claims' index to the queue table if it has none, once a process:
    /// the claims of a fair queue read each tenant's jobs through it, in the claim's
    /// order. Not a migration: InnoDB has no partial index, so every job enters it
    /// (a bulk insert took 19 to 36% longer with it, a lease 35%, a delete 38%), and only
    /// a database with fair queues pays for it. An online DDL (the table stays writable);
    /// workers adding it at once wait for the first.
    async fn fair_index(&self) -> Result<()> {
        self.fair_index
            .get_or_try_init(|| async {
                let sql = format!(
                    "ALTER TABLE {} ADD INDEX IF NOT EXISTS {}
                        (task_queue, task_tenant, task_priority, task_locked_until_ts, task_lock_handle_id)",
                    self.schema.flat_table("tasks_queue_t"),
                    self.schema.flat_table("tasks_queue_fair")
                );
                sqlx::query(&sql).execute(&self.pool).await?;
                Ok::<(), Error>(())
            })
            .await?;
        Ok(())
    }

    /// How many more jobs of `queue` its global limit lets run at `now` (`None`: it has
    /// none), with the queue's row locked until the transaction on `conn` ends, so
    /// claimers of it take turns; each counts the running jobs after the one before
    /// committed.
    async fn cap_room(
        &self,
        conn: &mut MySqlConnection,
        queue: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<i64>> {
        let cap: Option<Option<i64>> = sqlx::query_scalar(&format!(
            "SELECT CAST(queue_global_limit AS SIGNED) FROM {} WHERE queue_name = ? FOR UPDATE",
            self.schema.flat_table("queues_t")
        ))
        .bind(queue)
        .fetch_optional(&mut *conn)
        .await?;
        let Some(cap) = cap.flatten() else {
            return Ok(None);
        };
        // The leased jobs, as migration 8's triggers keep them.
        let running: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {} WHERE task_queue = ? AND task_locked_until_ts > ?",
            self.schema.flat_table("running_t")
        ))
        .bind(queue)
        .bind(dt(now))
        .fetch_one(&mut *conn)
        .await?;
        Ok(Some(cap - running))
    }
}

impl fair::Steps for MySqlStore {
    type Conn = MySqlConnection;
    type Job = ClaimedJob;

    fair::dialect_steps!(MySql);

    /// Through the fair index, one statement for each tenant (`claim_key`).
    async fn take(
        &self,
        conn: &mut MySqlConnection,
        claim: &super::super::Claim<'_>,
        keys: &[String],
        each: i64,
    ) -> Result<Vec<ClaimedJob>> {
        let mut jobs = Vec::new();
        for key in keys {
            let one = super::super::Claim {
                tenants: Some(std::slice::from_ref(key)),
                ..*claim
            };
            jobs.extend(self.claim_rows(conn, &one, each).await?);
        }
        Ok(jobs)
    }

    async fn rest(
        &self,
        conn: &mut MySqlConnection,
        claim: &super::super::Claim<'_>,
        limit: i64,
    ) -> Result<Vec<ClaimedJob>> {
        self.claim_rows(conn, claim, limit).await
    }
}

impl Work for MySqlStore {
    /// The claim under no rate limit: its queue's global limit's room (if capped), the
    /// claim, in one transaction.
    async fn claim(&self, claim: &super::super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        Ok(self.claim_rated(claim, &[]).await?.jobs)
    }

    /// A rate-limited claim, in one transaction: its queue's global limit's room (the
    /// queue's row locked first), each rate limit's (their rows locked next), the claim,
    /// and the starts recorded.
    async fn claim_rated(
        &self,
        claim: &super::super::Claim<'_>,
        keys: &[(&'static str, &str)],
    ) -> Result<RatedClaim> {
        if claim.fair.is_some() {
            self.fair_index().await?;
        }
        let capped = rates::capped_queue(claim)?;
        let per_tenant = tenants::tenant_capped_queue(claim)?;
        let asked = std::time::Instant::now();
        retrying!(self, "a claim", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let mut limit = claim.limit;
            if let Some(queue) = capped {
                if let Some(room) = self.cap_room(&mut tx, queue, claim.now).await? {
                    limit = limit.min(room);
                }
            }
            let mut room = match per_tenant {
                Some(queue) => {
                    tenants::room::<MySql>(&mut tx, &self.schema, queue, claim.now).await?
                }
                None => None,
            };
            let taken = rates::take_all::<MySql>(&mut tx, &self.schema, keys, claim.now).await?;
            limit = taken.room(limit);
            let counts = !keys.is_empty() || room.as_ref().is_some_and(|r| r.rate.is_some());
            let claim = &rates::after_locks(claim, asked, counts);
            if let Some(room) = room.as_mut() {
                room.now = claim.now;
            }
            let served = fair::claim_within(self, &mut *tx, claim, limit, room.as_mut()).await?;
            let opens_at = taken
                .spend::<MySql>(&mut tx, &self.schema, served.jobs.len(), claim.now)
                .await?;
            tx.commit().await?;
            Ok(RatedClaim {
                jobs: served.jobs,
                at: claim.now,
                opens_at: rates::later(opens_at, served.opens_at),
                turn: served.turn,
                held_tenants: served.passed,
            })
        })
    }

    /// Finalizes successful runs (fenced); the ids whose lease was still held.
    async fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let (held, posted): (Vec<Uuid>, bool) = retrying!(self, "a completion", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let done = self.complete_on(&mut tx, done, now).await?;
            tx.commit().await?;
            Ok(done)
        })?;
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
        let held: HashSet<Uuid> = retrying!(self, "failures", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let held = self.fail_on(&mut tx, failures, now).await?;
            tx.commit().await?;
            Ok(held)
        })?;
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
        if leases.is_empty() {
            return Ok(0);
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {} SET task_locked_until_ts = ",
            self.sql().queue
        ));
        query
            .push_bind(dt(now))
            .push(
                ", task_locked_by = NULL, task_attempt = task_attempt - 1 WHERE task_locked_by = ",
            )
            .push_bind(&self.worker_id)
            .push(" AND ");
        push_leases(&mut query, leases);
        let n = query
            .build()
            .execute(&mut *self.acquire().await?)
            .await?
            .rows_affected();
        wake();
        Ok(n)
    }

    /// Extends the leases still held; their ids (a missing one was lost).
    async fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        retrying!(self, "a heartbeat", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let rows = self.held(&mut tx, leases).await?;
            if !rows.is_empty() {
                let mut query = QueryBuilder::<MySql>::new(format!(
                    "UPDATE {} SET task_locked_until_ts = ",
                    self.sql().queue
                ));
                query
                    .push_bind(dt(until))
                    .push(" WHERE task_lock_handle_id IN (");
                let mut list = query.separated(", ");
                for row in &rows {
                    list.push_bind(row.task_lock_handle_id);
                }
                query.push(")");
                query.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(rows.iter().map(|r| r.task_id).collect())
        })
    }

    /// Posts one job with a unique key of mode `mode` (the periodic jobs' first runs).
    async fn enqueue_unique(
        &self,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> Result<(Uuid, bool, bool)> {
        enqueue_unique(&mut *self.acquire().await?, &self.schema, job, mode, now).await
    }

    /// Posts a cron tick once across workers (its id comes from its key); with
    /// `live_key`, only while no earlier tick holding that key is live; with `stored`, only
    /// while that stored schedule exists as it was read (read under a shared lock, so a
    /// removal waits for this and none is posted after it). False if it was not posted.
    async fn enqueue_tick(
        &self,
        job: NewJob,
        live_key: Option<&str>,
        stored: Option<(&str, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut conn = self.acquire().await?;
        let mut tx = conn.begin_with(BEGIN).await?;
        if let Some((name, updated_at)) = stored {
            let exists: Option<i32> = sqlx::query_scalar(&format!(
                "SELECT 1 FROM {} WHERE schedule_name = ? AND schedule_updated_at_ts = ? LOCK IN SHARE MODE",
                self.schema.flat_table("schedules_t")
            ))
            .bind(name)
            .bind(dt(updated_at))
            .fetch_optional(&mut *tx)
            .await?;
            if exists.is_none() {
                return Ok(false);
            }
        }
        if let Some(key) = live_key {
            if take_keys(&mut tx, &self.schema, &[(key, job.id)]).await?[0] != job.id {
                return Ok(false);
            }
        }
        // The results row keeps the tick's key; the queue row holds the live key (mode
        // skip) or none. Another worker posting the same tick meets its key: a duplicate.
        let posted = async {
            bind_result!(
                sqlx::query(&self.sql().insert_result),
                job,
                dt(now),
                None::<i16>
            )
            .execute(&mut *tx)
            .await?;
            let mut job = job;
            job.unique_key = live_key.map(str::to_owned);
            let mode = live_key.map(|_| crate::model::UniqueMode::Skip as i16);
            bind_new!(sqlx::query(&self.sql().insert_queue), job, dt(now), mode)
                .execute(&mut *tx)
                .await?;
            Ok::<_, sqlx::Error>(())
        }
        .await;
        match posted {
            Ok(()) => {}
            Err(e) if duplicate(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
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

    /// Splits the open-ended partition into the next periods' (seed 002).
    async fn ensure_partitions(
        &self,
        now: DateTime<Utc>,
        span: crate::store::PartitionSpan,
    ) -> Result<Vec<String>> {
        partitions::ensure(&self.pool, &self.schema, now, span).await
    }

    /// Retires whole results partitions past the retention (`partitions::retire`).
    async fn retire_partitions(
        &self,
        cutoff: DateTime<Utc>,
        archive: Option<&str>,
        within: bool,
        stopping: &tokio_util::sync::CancellationToken,
    ) -> Result<Retired> {
        partitions::retire(&self.pool, &self.schema, cutoff, archive, within, stopping).await
    }

    /// InnoDB purges deleted rows itself: nothing to watch.
    async fn table_health(&self) -> Result<Vec<super::super::TableHealth>> {
        Ok(Vec::new())
    }

    async fn vacuum(&self, _table: &str) -> Result<bool> {
        Ok(false)
    }

    async fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "INSERT INTO {} (metric_owner_process_id, metric_id, metric_category, metric_value,
                metric_last_updated) ",
            self.schema.flat_table("metrics_t")
        ));
        query.push_values(metrics, |mut row, (id, value)| {
            row.push_bind(&self.worker_id)
                .push_bind(*id)
                .push("'worker'")
                .push_bind(*value)
                .push_bind(dt(now));
        });
        query.push(
            " ON DUPLICATE KEY UPDATE metric_value = VALUES(metric_value),
                metric_last_updated = VALUES(metric_last_updated)",
        );
        query.build().execute(&mut *self.acquire().await?).await?;
        Ok(())
    }

    /// One connection attempt outside the pool, saying why it failed.
    async fn probe(&self) -> std::result::Result<(), ProbeFailure> {
        let options = self.pool.connect_options();
        let unreachable = |cause: String| Error::Connect {
            address: address(&options),
            cause,
        };
        let error =
            match tokio::time::timeout(ACQUIRE_WAIT, MySqlConnection::connect_with(&options)).await
            {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(ProbeFailure::Transient(unreachable(format!(
                        "no answer within {}",
                        humantime::format_duration(ACQUIRE_WAIT)
                    ))))
                }
            };
        Err(match &error {
            sqlx::Error::Io(io) => ProbeFailure::Transient(unreachable(io.to_string())),
            sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => {
                ProbeFailure::Transient(unreachable(error.to_string()))
            }
            // 1040 too many connections, 1053 shutting down, 1203 user's connection limit.
            sqlx::Error::Database(db) => match number(&error) {
                Some(1040 | 1053 | 1203) => {
                    ProbeFailure::Transient(unreachable(db.message().to_owned()))
                }
                _ => ProbeFailure::Permanent(unreachable(db.message().to_owned())),
            },
            _ => ProbeFailure::Permanent(unreachable(error.to_string())),
        })
    }
}
