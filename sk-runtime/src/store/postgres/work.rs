//! The worker's store: its connections, the claim, outcomes, leases, ticks and upkeep (the driver contract's `Work`).

use super::pooler::{on, Held, On};
use super::*;
use crate::store::bound::Guarded;

/// The worker's view of the store: every statement that runs under a lease.
#[derive(Clone)]
pub(crate) struct PgStore {
    pub(crate) pool: PgPool,
    pub(crate) schema: Schema,
    pub(crate) worker_id: String,
    /// The bound of each call (`store::bound`).
    pub(crate) bounds: super::super::bound::Bounds,
    /// Results partitions, for statements that address one directly.
    pub(crate) partitions: partitions::Known,
    /// Whether its connections keep prepared statements: false behind a transaction
    /// pooler, where every statement runs unnamed in a transaction (`pooler`).
    pub(crate) keep: bool,
    /// The transaction of each completion whose COMMIT got no reply, by job id: read
    /// back by `succeeded_here` (`pg_xact_status`), for the successes that leave no
    /// results row to find.
    pub(crate) in_doubt: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Uuid, i64>>>,
}

/// How long sk waits for a pooled connection before it looks for the reason itself: the
/// pool's own wait (its `acquire_timeout`, 30 s by default) retries a refused connection
/// in silence and then says only that it timed out.
pub(super) const ACQUIRE_WAIT: Duration = Duration::from_secs(2);

/// `host:port` (or the socket path) and database of a connection's options.
pub(crate) fn address(options: &PgConnectOptions) -> String {
    let place = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    match options.get_database() {
        Some(db) => format!("{place}/{db}"),
        None => place,
    }
}

impl PgStore {
    /// Where the pool connects, for messages.
    pub(crate) fn address(&self) -> String {
        address(&self.pool.connect_options())
    }

    /// The connections a role without superuser rights may open (`max_connections` less
    /// the reserved ones), and the client connections open now.
    pub(crate) async fn connection_room(&self) -> Result<(i64, i64)> {
        let mut held = self.held().await?;
        let room = sqlx::query_as(
            "SELECT current_setting('max_connections')::int8
                 - current_setting('superuser_reserved_connections')::int8
                 - coalesce(current_setting('reserved_connections', true)::int8, 0),
                 (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
        )
        .fetch_one(held.on())
        .await?;
        held.done().await?;
        Ok(room)
    }

    /// A connection for one operation (a transaction behind a transaction pooler: its
    /// `done` commits), or within [`ACQUIRE_WAIT`] an error that says why there is none.
    pub(crate) async fn held(&self) -> Result<Held> {
        let conn = self.acquire().await?;
        Held::from(conn, self.keep).await.map_err(|e| self.lost(e))
    }

    /// The executor of a statement on `conn`, as this pool prepares them.
    pub(crate) fn on<'c>(&self, conn: &'c mut PgConnection) -> On<'c> {
        on(conn, self.keep)
    }

    /// A pooled connection, or within [`ACQUIRE_WAIT`] an error that says why there is none.
    pub(crate) async fn acquire(&self) -> Result<Guarded<Postgres>> {
        match tokio::time::timeout(ACQUIRE_WAIT, self.pool.acquire()).await {
            Ok(Ok(conn)) => Ok(Guarded::new(conn)),
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(match self.probe().await {
                Err(ProbeFailure::Transient(e) | ProbeFailure::Permanent(e)) => e,
                Ok(()) => super::super::pool_timed_out(
                    ACQUIRE_WAIT,
                    self.pool.size(),
                    self.pool.options().get_max_connections(),
                ),
            }),
            Ok(Err(e)) => Err(self.lost(e)),
        }
    }

    /// Names the database when a connection broke (reset, closed, refused).
    pub(super) fn lost(&self, error: sqlx::Error) -> Error {
        match error {
            sqlx::Error::Io(io) => Error::Connect {
                address: self.address(),
                cause: io.to_string(),
            },
            other => other.into(),
        }
    }

    pub(super) fn lost_in(&self, error: Error) -> Error {
        match error {
            Error::Database(e) => self.lost(e),
            other => other,
        }
    }

    /// A claim statement with `$1` to `$7` bound.
    pub(super) fn claim_query<'q>(
        &'q self,
        statement: &'q str,
        claim: &super::super::Claim<'q>,
    ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(statement)
            .bind(claim.now)
            .bind(claim.task_types)
            .bind(claim.queues)
            .bind(claim.limit)
            .bind(claim.lease_until)
            .bind(&self.worker_id)
            .bind(claim.tenants)
    }

    /// Starts a transaction for a statement that joins a batch of ids to sk's tables.
    /// Each such statement is a primary-key probe per row, but in a custom plan the
    /// planner sees the batch's length and, from a few hundred rows on, prefers hash joins
    /// over sequential scans of the queue and the ever-growing results table (5 to 30 times
    /// slower here; docs/performance.md). The setting is scoped to this transaction, and
    /// goes with the `BEGIN` in one simple query: one round trip, not two.
    pub(super) async fn batched(
        conn: &mut PgConnection,
    ) -> Result<sqlx::Transaction<'_, sqlx::Postgres>> {
        Ok(conn
            .begin_with("BEGIN; SET LOCAL enable_seqscan = off")
            .await?)
    }
}

/// Locks a stored schedule as the worker read it (same update time) until `tx` ends, so a
/// tick is enqueued only while its schedule exists unchanged; false if it was removed or
/// changed since.
pub(crate) async fn schedule_hold(
    tx: On<'_>,
    schema: &Schema,
    name: &str,
    updated_at: DateTime<Utc>,
) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, i32>(&format!(
        "SELECT 1 FROM {} WHERE schedule_name = $1 AND schedule_updated_at_ts = $2 FOR SHARE",
        schema.table("schedules_t")
    ))
    .bind(name)
    .bind(updated_at)
    .fetch_optional(tx)
    .await?
    .is_some())
}

/// A claim's rows, each decoded on its own (`super::super::claimed_row`); a row of which not even
/// the lease can be read is left to its lease, named in the log.
pub(super) fn claimed(rows: &[sqlx::postgres::PgRow]) -> Vec<ClaimedJob> {
    rows.iter()
        .filter_map(|row| {
            super::super::claimed_row(row, 0)
                .map_err(|e| super::super::unleasable(&e))
                .ok()
        })
        .collect()
}

impl Work for PgStore {
    async fn claim(&self, claim: &super::super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        // A fair claim of a limited queue takes the room first, in one transaction, as
        // does a claim of a queue with a limit per tenant.
        if claim.capped && claim.fair.is_some() || claim.tenant_capped {
            return Ok(self.claim_rated(claim, &[]).await?.jobs);
        }
        let mut held = self.held().await?;
        let capped = match claim.queues {
            Some([queue]) if claim.capped => queue,
            _ => {
                let jobs = fair::claim(self, held.conn(), claim, claim.limit).await?;
                held.done().await.map_err(|e| self.lost(e))?;
                return Ok(jobs);
            }
        };
        if claim.paused.contains(capped) {
            return Ok(Vec::new());
        }
        // A queue with a limit across workers: the claim locks the queue's row
        // (`queue_room`), so claims of it take turns, each counting the running jobs
        // after the one before committed.
        let rows = self
            .claim_query(&self.schema.sql.claim_capped, claim)
            .bind(capped)
            .fetch_all(held.on())
            .await
            .map_err(|e| self.lost(e))?;
        held.done().await.map_err(|e| self.lost(e))?;
        Ok(claimed(&rows))
    }

    /// A rate-limited claim, in one transaction: its queue's global limit's room
    /// (`queue_room`, which locks the queue's row), each rate limit's (its row locked
    /// next, always in that order), the claim, and the starts recorded.
    async fn claim_rated(
        &self,
        claim: &super::super::Claim<'_>,
        keys: &[(&'static str, &str)],
    ) -> Result<RatedClaim> {
        let capped = rates::capped_queue(claim)?;
        if capped.is_some_and(|queue| claim.paused.iter().any(|p| p == queue)) {
            return Ok(RatedClaim {
                jobs: Vec::new(),
                at: claim.now,
                opens_at: None,
                turn: None,
                held_tenants: 0,
            });
        }
        let per_tenant = tenants::tenant_capped_queue(claim)?;
        let asked = std::time::Instant::now();
        let mut conn = self.acquire().await?;
        // Under limits per tenant, the claim's statements (the locks, the count, the
        // tenants' probe, a claim per share) were planned again at every claim, as custom
        // plans: 0.1-0.3 ms each, a third of the claim. Their generic plans serve the
        // same indexes (burn_down_tenant_limit: 1.4 times the jobs a second, server CPU
        // 214 µs a job against 319). Other rated claims gained nothing, so keep theirs.
        let begin = if per_tenant.is_some() {
            "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"
        } else {
            "BEGIN"
        };
        let mut tx = conn.begin_with(begin).await.map_err(|e| self.lost(e))?;
        let mut limit = claim.limit;
        if let Some(queue) = capped {
            let room: Option<i64> = sqlx::query_scalar(&format!(
                "SELECT {}($1, $2)",
                self.schema.table("queue_room")
            ))
            .bind(queue)
            .bind(claim.now)
            .fetch_one(self.on(&mut tx))
            .await
            .map_err(|e| self.lost(e))?;
            limit = limit.min(room.unwrap_or(limit));
        }
        // The queue's row is locked before any rate limit's, as by `queue_room`.
        let mut room = match per_tenant {
            Some(queue) => tenants::room::<Postgres>(&mut tx, &self.schema, queue, claim.now)
                .await
                .map_err(|e| self.lost_in(e))?,
            None => None,
        };
        let taken = rates::take_all::<Postgres>(&mut tx, &self.schema, keys, claim.now)
            .await
            .map_err(|e| self.lost_in(e))?;
        limit = taken.room(limit);
        let counts = !keys.is_empty() || room.as_ref().is_some_and(|r| r.rate.is_some());
        let claim = &rates::after_locks(claim, asked, counts);
        if let Some(room) = room.as_mut() {
            room.now = claim.now;
        }
        let served = if limit > 0 {
            let claim = super::super::Claim {
                capped: false,
                ..*claim
            };
            fair::claim_within(self, &mut *tx, &claim, limit, room.as_mut()).await?
        } else {
            fair::Served::none()
        };
        let opens_at = taken
            .spend::<Postgres>(&mut tx, &self.schema, served.jobs.len(), claim.now)
            .await
            .map_err(|e| self.lost_in(e))?;
        tx.commit().await.map_err(|e| self.lost(e))?;
        Ok(RatedClaim {
            jobs: served.jobs,
            at: claim.now,
            opens_at: rates::later(opens_at, served.opens_at),
            turn: served.turn,
            held_tenants: served.passed,
        })
    }

    /// Finalizes successful runs; returns the ids whose lease was still held.
    async fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        self.complete_batch(done, now).await
    }

    /// The outputs of job `id`'s dependencies, in order.
    async fn inputs(&self, id: Uuid) -> Result<Vec<Option<Option<String>>>> {
        let mut held = self.held().await?;
        let inputs = flow::inputs(held.conn(), &self.schema, id).await?;
        held.done().await.map_err(|e| self.lost(e))?;
        Ok(inputs)
    }

    /// Records failed runs (retry or final) in one statement and one transaction, rows
    /// locked in id order; per failure, false when its lease was lost (fenced).
    async fn fail(&self, failures: &[Failure], now: DateTime<Utc>) -> Result<Vec<bool>> {
        let mut sorted: Vec<&Failure> = failures.iter().collect();
        sorted.sort_unstable_by_key(|f| f.lease.id);
        let ids: Vec<Uuid> = sorted.iter().map(|f| f.lease.id).collect();
        let attempts: Vec<i32> = sorted.iter().map(|f| f.lease.attempt).collect();
        let retry_at: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|f| f.retry_at).collect();
        let status: Vec<i32> = sorted.iter().map(|f| f.status as i32).collect();
        let kinds: Vec<&str> = sorted.iter().map(|f| f.kind.as_str()).collect();
        let messages: Vec<&str> = sorted.iter().map(|f| f.message.as_str()).collect();
        let details: Vec<Option<&str>> = sorted.iter().map(|f| f.detail.as_deref()).collect();
        let recoverable: Vec<bool> = sorted.iter().map(|f| f.recoverable).collect();
        let millis: Vec<i64> = sorted.iter().map(|f| f.millis).collect();
        let seed_errors: Vec<String> = sorted.iter().map(|f| f.seed_error()).collect();
        let mut conn = self.acquire().await?;
        let mut tx = Self::batched(&mut conn)
            .await
            .map_err(|e| self.lost_in(e))?;
        let held: Vec<(Uuid, bool, String)> = sqlx::query_as(&self.schema.sql.fail)
            .bind(&ids)
            .bind(&attempts)
            .bind(&self.worker_id)
            .bind(&retry_at)
            .bind(&status)
            .bind(&kinds)
            .bind(&messages)
            .bind(&details)
            .bind(&recoverable)
            .bind(&millis)
            .bind(now)
            .bind(&seed_errors)
            .bind(self.schema.done_channel())
            .fetch_all(self.on(&mut tx))
            .await
            .map_err(|e| self.lost(e))?;
        // Jobs others wait on that failed for good end those jobs in the same transaction.
        let roots: Vec<(Uuid, String)> = held
            .iter()
            .filter(|(_, dependants, _)| *dependants)
            .filter_map(|(id, _, task_type)| {
                let f = sorted[sorted.binary_search_by_key(id, |f| f.lease.id).ok()?];
                Some((
                    *id,
                    super::super::dependency_message(*id, task_type, false, &f.message),
                ))
            })
            .collect();
        if !roots.is_empty() {
            flow::propagate(&mut tx, &self.schema, roots, false, now)
                .await
                .map_err(|e| self.lost_in(e))?;
        }
        tx.commit().await.map_err(|e| self.lost(e))?;
        let held: std::collections::HashSet<Uuid> = held.into_iter().map(|(id, _, _)| id).collect();
        Ok(failures
            .iter()
            .map(|f| held.contains(&f.lease.id))
            .collect())
    }

    /// Releases leases at once (graceful stop), without using up an attempt.
    async fn give_back(&self, leases: &[Lease], now: DateTime<Utc>) -> Result<u64> {
        let (ids, attempts) = in_lock_order(leases);
        let mut conn = self.acquire().await?;
        let mut tx = Self::batched(&mut conn)
            .await
            .map_err(|e| self.lost_in(e))?;
        let done = sqlx::query(&self.schema.sql.give_back)
            .bind(now)
            .bind(ids)
            .bind(attempts)
            .bind(&self.worker_id)
            .execute(self.on(&mut tx))
            .await
            .map_err(|e| self.lost(e))?;
        tx.commit().await.map_err(|e| self.lost(e))?;
        Ok(done.rows_affected())
    }

    /// Extends the leases still held; returns their ids (a missing one was lost).
    async fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let (ids, attempts) = in_lock_order(leases);
        let mut conn = self.acquire().await?;
        let mut tx = Self::batched(&mut conn)
            .await
            .map_err(|e| self.lost_in(e))?;
        let held = sqlx::query_scalar(&self.schema.sql.extend)
            .bind(until)
            .bind(ids)
            .bind(attempts)
            .bind(&self.worker_id)
            .fetch_all(self.on(&mut tx))
            .await
            .map_err(|e| self.lost(e))?;
        tx.commit().await.map_err(|e| self.lost(e))?;
        Ok(held)
    }

    /// Posts one job with a unique key of mode `mode` (the periodic jobs' first runs).
    async fn enqueue_unique(
        &self,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> Result<(Uuid, bool, bool)> {
        let mut held = self.held().await?;
        let keep = held.keeps();
        let posted = enqueue_unique(on(held.conn(), keep), &self.schema, job, mode, now).await?;
        held.done().await.map_err(|e| self.lost(e))?;
        Ok(posted)
    }

    /// Posts a cron tick, once across workers (its id comes from its unique key); with
    /// `live_key`, only while no earlier tick holding that key is live (no overlap); with
    /// `stored`, only while that stored schedule exists as it was read (name and update
    /// time), so none goes in after `StoredSchedules::remove` returns. False if it was not
    /// posted.
    async fn enqueue_tick(
        &self,
        job: NewJob,
        live_key: Option<&str>,
        stored: Option<(&str, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut conn = self.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        if let Some((name, updated_at)) = stored {
            if !schedule_hold(self.on(&mut tx), &self.schema, name, updated_at).await? {
                return Ok(false);
            }
        }
        let id = match live_key {
            None => enqueue_one(self.on(&mut tx), &self.schema, job, now).await?,
            Some(key) => enqueue_tick(self.on(&mut tx), &self.schema, job, key, now).await?,
        };
        if id.is_none() {
            // Nothing to keep: a queue row without its results row is a tick that
            // already ran (`enqueue_tick`), and goes with the rollback.
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn stored_schedules(&self) -> Result<Vec<ScheduleRow>> {
        Admin::schedule_list(&self.pool, &self.schema).await
    }

    /// Applies the migrations and creates the results partitions for `now` and ahead.
    async fn migrate(&self) -> Result<()> {
        Admin::migrate(&self.pool, &self.schema).await
    }

    /// Creates the results partitions from `now`'s span to two spans ahead (their names),
    /// and keeps the map of partitions the completions address directly.
    async fn ensure_partitions(
        &self,
        now: DateTime<Utc>,
        span: crate::store::PartitionSpan,
    ) -> Result<Vec<String>> {
        partitions::ensure(&self.pool, &self.schema, now, span, Some(&self.partitions)).await
    }

    /// Retires the results partitions past `cutoff` (`partitions::retire`), and reads the
    /// partitions again for the completions' map if it retired any.
    async fn retire_partitions(
        &self,
        cutoff: DateTime<Utc>,
        archive: Option<&str>,
        within: bool,
        stopping: &tokio_util::sync::CancellationToken,
    ) -> Result<super::super::Retired> {
        let retired =
            partitions::retire(&self.pool, &self.schema, cutoff, archive, within, stopping).await?;
        if !retired.dropped.is_empty() || !retired.archived.is_empty() {
            self.partitions
                .set(partitions::list(&self.pool, &self.schema).await?);
        }
        Ok(retired)
    }

    /// Live and dead tuples of the queue table and of each results partition.
    async fn table_health(&self) -> Result<Vec<TableHealth>> {
        let rows: Vec<(String, bool, i64, i64, i64, bool)> =
            sqlx::query_as(&self.schema.sql.dead_tuples)
                .fetch_all(self.held().await?.on())
                .await
                .map_err(|e| self.lost(e))?;
        Ok(rows
            .into_iter()
            .map(
                |(name, is_queue, live, dead, changed, analyzed)| TableHealth {
                    name,
                    is_queue,
                    live,
                    dead,
                    changed,
                    analyzed,
                },
            )
            .collect())
    }

    /// Vacuums one of sk's tables (`name` as [`TableHealth`] gives it) unless another
    /// worker is doing it; returns whether this worker did.
    async fn vacuum(&self, table: &str) -> Result<bool> {
        let mut conn = self.acquire().await?;
        let statement = format!("VACUUM (ANALYZE) {table}");
        if !self.keep {
            // Behind a transaction pooler a session's advisory lock may be taken on one
            // server and released on another: vacuum without it (two workers vacuuming
            // one table at once take turns on the table's lock).
            (&mut *conn)
                .execute(statement.as_str())
                .await
                .map_err(|e| self.lost(e))?;
            return Ok(true);
        }
        let key = format!("sk-vacuum:{table}");
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
            .bind(&key)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.lost(e))?;
        if !locked {
            return Ok(false);
        }
        let vacuumed = (&mut *conn).execute(statement.as_str()).await;
        let unlocked = sqlx::query("SELECT pg_advisory_unlock(hashtext($1))")
            .bind(&key)
            .execute(&mut *conn)
            .await;
        vacuumed?;
        unlocked?;
        Ok(true)
    }

    async fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()> {
        let (ids, values): (Vec<&str>, Vec<i64>) = metrics.iter().copied().unzip();
        let mut held = self.held().await?;
        sqlx::query(&self.schema.sql.metrics)
            .bind(&self.worker_id)
            .bind(ids)
            .bind(values)
            .bind(now)
            .execute(held.on())
            .await
            .map_err(|e| self.lost(e))?;
        held.done().await.map_err(|e| self.lost(e))?;
        Ok(())
    }

    /// One connection attempt outside the pool, whose own retries hide the cause.
    async fn probe(&self) -> Result<(), ProbeFailure> {
        let options = self.pool.connect_options();
        let unreachable = |cause: String| Error::Connect {
            address: address(&options),
            cause,
        };
        let error =
            match tokio::time::timeout(ACQUIRE_WAIT, PgConnection::connect_with(&options)).await {
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
            sqlx::Error::Database(db) => {
                // 57P03: the server is starting up or shutting down; 53300: too many
                // connections; class 08: connection exceptions.
                let code = db.code().unwrap_or_default();
                let cause = db.message().to_owned();
                if code == "57P03" || code == "53300" || code.starts_with("08") {
                    ProbeFailure::Transient(unreachable(cause))
                } else {
                    ProbeFailure::Permanent(unreachable(cause))
                }
            }
            _ => ProbeFailure::Permanent(unreachable(error.to_string())),
        })
    }
}

crate::store::worker_rows::worker_rows_of!(PgStore);
