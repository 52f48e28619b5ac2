//! The worker's store on SQLite: its turns to write, its connections and checkpoints, and the decoding of a claim's rows.

use super::*;

/// The worker's view of the store on SQLite.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    pub(crate) pool: SqlitePool,
    pub(crate) schema: Schema,
    pub(crate) worker_id: String,
    /// The bound of each call (`store::bound`).
    pub(crate) bounds: super::super::bound::Bounds,
    /// This worker's writes, one at a time (`SqliteStore::writing`).
    pub(crate) writer: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// A checkpoint of this worker's is running (`SqliteStore::checkpoint`).
    pub(crate) checkpointing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Jobs this worker finished since it last started a checkpoint.
    pub(crate) since_checkpoint: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How many finished jobs a worker's WAL checkpoint waits for (`SqliteStore::checkpoint`):
/// about a third of the WAL pages at which SQLite checkpoints by itself, in a burn-down.
pub(super) const CHECKPOINT_EVERY: u64 = 256;

impl SqliteStore {
    pub(super) fn sql(&self) -> &Statements {
        &self.schema.sqlite
    }

    /// The database file, for messages.
    pub(crate) fn address(&self) -> String {
        address(&self.pool.connect_options())
    }

    /// A connection for a write, and this worker's turn to write. The worker's claims,
    /// completions and heartbeats would otherwise queue on SQLite's own lock, whose busy
    /// handler retries by sleeping (1 ms, then longer steps up to 100 ms); a mutex hands
    /// over at once. Other processes and the application's enqueues still meet at
    /// SQLite's lock.
    pub(super) async fn writing(
        &self,
    ) -> Result<(
        tokio::sync::MutexGuard<'_, ()>,
        sqlx::pool::PoolConnection<Sqlite>,
    )> {
        let turn = self.writer.lock().await;
        Ok((turn, self.pool.acquire().await?))
    }

    /// After `jobs` more completions: once this worker has finished `CHECKPOINT_EVERY`
    /// jobs since its last one, starts a passive checkpoint of the WAL on another
    /// connection, unless one of its own is running. The pages its writes added to the
    /// WAL then go back into the database file beside its next writes instead of in one
    /// of them: else the commit that takes the WAL past `wal_autocheckpoint` pages (1,000
    /// by default) checkpoints in line, holding this worker's turn to write while it
    /// copies and syncs (about 6 ms after every two or three batches of 1,000 jobs in a
    /// burn-down). Not after every completion: a trickle of jobs would sync the file once
    /// a job. The automatic checkpoint stays, for when this one falls behind; a database
    /// not in WAL mode takes the pragma as a no-op.
    pub(super) fn checkpoint(&self, jobs: usize) {
        use std::sync::atomic::Ordering;
        let since = self
            .since_checkpoint
            .fetch_add(jobs as u64, Ordering::Relaxed)
            + jobs as u64;
        if since < CHECKPOINT_EVERY || self.checkpointing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.since_checkpoint.store(0, Ordering::Relaxed);
        let pool = self.pool.clone();
        let running = std::sync::Arc::clone(&self.checkpointing);
        tokio::spawn(async move {
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                tracing::debug!("sk: a WAL checkpoint failed (the automatic one stays): {e}");
            }
            running.store(false, Ordering::Release);
        });
    }

    /// A transaction that holds the write lock from its start (module docs).
    pub(super) async fn write(
        conn: &mut SqliteConnection,
    ) -> Result<sqlx::Transaction<'_, Sqlite>> {
        Ok(conn.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Posts a restart or a periodic job's next run after `row`'s outcome (as on
    /// PostgreSQL: a new job with the same key, payload and period).
    /// Whether it posted one.
    pub(super) async fn again(
        &self,
        tx: &mut SqliteConnection,
        row: &Row,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        if !row.task_rerun && row.task_every_ms.is_none() {
            return Ok(false);
        }
        let (id, run_at) = match row.task_every_ms {
            Some(ms) if !row.task_rerun => crate::clock::next_run(row.task_id, ms, now),
            _ => (crate::clock::uuid_v7(now), now),
        };
        sqlx::query(&self.sql().again)
            .bind(id)
            .bind(&row.task_type)
            .bind(&row.task_source)
            .bind(&row.task_payload)
            .bind(int4(row.task_priority))
            .bind(ts(now))
            .bind(ts(run_at))
            .bind(&row.task_queue)
            .bind(int4(row.task_max_attempts))
            .bind(&row.task_tenant)
            .bind(&row.task_correlation_id)
            .bind(&row.task_metadata)
            .bind(&row.task_unique_key)
            .bind(row.task_unique_mode)
            .bind(row.task_every_ms)
            .bind(row.task_timeout_ms)
            .execute(&mut *tx)
            .await?;
        Ok(true)
    }

    pub(super) async fn write_stats(
        &self,
        tx: &mut SqliteConnection,
        stats: Stats,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut types: Vec<_> = stats.0.into_iter().collect();
        types.sort_by(|a, b| a.0.cmp(&b.0));
        for (task_type, (total, n, fastest, longest, last)) in types {
            sqlx::query(&self.sql().stats)
                .bind(task_type)
                .bind(&self.worker_id)
                .bind(total)
                .bind(fastest)
                .bind(longest)
                .bind(n)
                .bind(last)
                .bind(ts(now))
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// Records one successful run inside the job's own transaction (the caller commits);
    /// false when the lease was lost (fenced), and the caller then rolls back.
    pub(crate) async fn complete_in(
        &self,
        tx: &mut SqliteConnection,
        done: &Success,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let (held, _posted) = self
            .complete_on(tx, std::slice::from_ref(done), now)
            .await?;
        // A rerun or next run it posted is found by the next poll.
        Ok(!held.is_empty())
    }

    /// The statements of a completion, on a connection in a write transaction: the ids
    /// whose lease was held, and whether a job was posted (a rerun, a periodic job's next).
    pub(super) async fn complete_on(
        &self,
        tx: &mut SqliteConnection,
        done: &[Success],
        now: DateTime<Utc>,
    ) -> Result<(Vec<Uuid>, bool)> {
        let batch: Vec<(String, i32, i64, Option<&str>, bool)> = done
            .iter()
            .map(|s| {
                (
                    s.lease.id.simple().to_string(),
                    s.lease.attempt,
                    s.millis,
                    s.output.as_deref(),
                    s.keep,
                )
            })
            .collect();
        let batch = serde_json::to_string(&batch)
            .map_err(|e| Error::invalid("job output", e.to_string()))?;
        // Set-based: a batch costs the same few statements however long it is (each
        // statement is a round trip to sqlx's SQLite thread, which is what a job costs).
        let rows = sqlx::query(&self.sql().complete)
            .bind(batch)
            .bind(&self.worker_id)
            .bind(ts(now))
            .fetch_all(&mut *tx)
            .await?;
        let row = last_row(&rows, "the completion")?;
        let (held, rare): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
        let mut posted = false;
        if rare > 0 {
            // Lost attempts to move into the record, reruns and next runs to post, jobs
            // others wait on and jobs that waited (`flow::settle`): the rows the batch
            // copied whole.
            let rows = sqlx::query("SELECT * FROM temp.sk_gone")
                .fetch_all(&mut *tx)
                .await?;
            let mut outputs = Vec::new();
            let mut fed = Vec::new();
            for row in rows {
                let ms: i64 = row.try_get("ms")?;
                let output: Option<String> = row.try_get("output")?;
                let row = <Row as sqlx::FromRow<_>>::from_row(&row)?;
                if row.task_dependants {
                    outputs.push((row.task_id, output.clone()));
                }
                if row.task_fed {
                    fed.push(row.task_id);
                }
                let lost = row.lost();
                if !lost.is_empty() {
                    let first = row.first_started(&lost);
                    let lost_count = lost.len() as i64;
                    let errors = errors_with(&mut *tx, &self.schema, row.task_id, lost).await?;
                    sqlx::query(&self.sql().success)
                        .bind(row.task_id)
                        .bind(&row.task_type)
                        .bind(&row.task_source)
                        .bind(&row.task_queue)
                        .bind(int4(row.task_priority))
                        .bind(&row.task_posted_at_ts)
                        .bind(&row.task_tenant)
                        .bind(&row.task_correlation_id)
                        .bind(&row.task_metadata)
                        .bind(lost_count)
                        .bind(ms)
                        .bind(ts(now))
                        .bind(&self.worker_id)
                        .bind(output)
                        .bind(first)
                        .bind(&row.task_claimed_at_ts)
                        .bind(errors)
                        .bind(&row.task_payload)
                        .execute(&mut *tx)
                        .await?;
                }
                posted |= self.again(&mut *tx, &row, now).await?;
            }
            let outputs: Vec<(Uuid, Option<&str>)> =
                outputs.iter().map(|(id, o)| (*id, o.as_deref())).collect();
            posted |= flow::settle(&mut *tx, &self.schema, &outputs, &fed, now).await?;
        }
        let held: Vec<Uuid> = from_json(&held, "completed ids")?;
        Ok((held, posted))
    }

    /// The statements of `fail`, in a write transaction: the ids whose lease was held.
    pub(super) async fn fail_on(
        &self,
        tx: &mut SqliteConnection,
        failures: &[Failure],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>> {
        let by_id: HashMap<Uuid, &Failure> = failures.iter().map(|f| (f.lease.id, f)).collect();
        let hex = |id: Uuid| id.simple().to_string();
        let json = |value: serde_json::Value| value.to_string();
        let leases = json(serde_json::json!(failures
            .iter()
            .map(|f| (hex(f.lease.id), f.lease.attempt))
            .collect::<Vec<_>>()));
        // One JSON value for all rows, not a row each (as a claim's: `ClaimedRow`).
        let rows: String = sqlx::query_scalar(&self.sql().failed_rows)
            .bind(leases)
            .bind(&self.worker_id)
            .fetch_one(&mut *tx)
            .await?;
        let rows: Vec<Row> = from_json(&rows, "failed rows")?;
        if rows.is_empty() {
            return Ok(HashSet::new());
        }
        let (retried, last): (Vec<&Row>, Vec<&Row>) = rows
            .iter()
            .partition(|r| by_id[&r.task_id].retry_at.is_some());
        if !last.is_empty() {
            let ids = json(serde_json::json!(last
                .iter()
                .map(|r| hex(r.task_id))
                .collect::<Vec<_>>()));
            sqlx::query(&format!(
                "DELETE FROM {} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))",
                self.sql().queue
            ))
            .bind(ids)
            .execute(&mut *tx)
            .await?;
        }
        if !retried.is_empty() {
            // The rows wait again, each until its retry time; their lost attempts move to
            // the results rows.
            let retry_at = json(serde_json::json!(retried
                .iter()
                .map(|r| (hex(r.task_id), by_id[&r.task_id].retry_at.map(ts)))
                .collect::<Vec<_>>()));
            sqlx::query(&format!(
                "UPDATE {q} SET task_locked_until_ts = j.value ->> 1, task_locked_by = NULL,
                    task_lost_attempts = NULL, task_has_result = 1
                 FROM json_each($1) j WHERE {q}.task_id = unhex(j.value ->> 0)",
                q = self.sql().queue
            ))
            .bind(retry_at)
            .execute(&mut *tx)
            .await?;
        }
        // Each results row's list of failed attempts gets this one (and the lost ones).
        let ids = json(serde_json::json!(rows
            .iter()
            .map(|r| hex(r.task_id))
            .collect::<Vec<_>>()));
        let recorded: HashMap<Uuid, Option<String>> = sqlx::query_as(&format!(
            "SELECT task_id, task_errors FROM {} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))",
            self.schema.sqlite.results
        ))
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let values = super::super::failed_runs(&rows, &by_id, &recorded, &self.worker_id, ts(now));
        // SQLite takes at most 32,766 bound values a statement: 25 a row.
        for chunk in values.chunks(1000) {
            let mut query = sqlx::QueryBuilder::<Sqlite>::new(&self.sql().failure);
            query.push(" ");
            query.push_values(chunk, |mut v, run| {
                let (row, f) = (run.row, run.failure);
                let last_run = f.retry_at.is_none();
                v.push_bind(row.task_id)
                    .push_bind(&row.task_type)
                    .push_bind(&row.task_source)
                    .push_bind(&row.task_queue)
                    .push_bind(int4(row.task_priority))
                    .push_bind(&row.task_posted_at_ts)
                    .push_bind(&row.task_tenant)
                    .push_bind(&row.task_correlation_id)
                    .push_bind(&row.task_metadata)
                    .push_bind(f.status as i32)
                    .push_bind(run.failed)
                    .push_bind(&f.kind)
                    .push_bind(&f.message)
                    .push_bind(&f.detail)
                    .push_bind(f.seed_error())
                    .push_bind(f.recoverable)
                    .push_bind(f.millis)
                    .push_bind(last_run.then(|| ts(now)))
                    // A job that failed for good keeps its payload, to inspect or re-post.
                    .push_bind(if last_run {
                        row.task_payload.as_deref()
                    } else {
                        None
                    })
                    .push_bind(&self.worker_id)
                    .push_bind(run.log.as_str())
                    .push("NULL")
                    .push_bind(run.first.as_deref())
                    .push_bind(&row.task_claimed_at_ts)
                    .push_bind(int4(row.task_max_attempts))
                    .push_bind(row.task_timeout_ms);
            });
            query.push(format!(
                " ON CONFLICT (task_id) DO UPDATE SET {FAILURE_UPDATE}"
            ));
            query.build().execute(&mut *tx).await?;
        }
        // Periodic jobs' next runs, and jobs others wait on, which end with this one.
        let mut roots = Vec::new();
        for row in &last {
            self.again(&mut *tx, row, now).await?;
            if row.task_dependants {
                let message = super::super::dependency_message(
                    row.task_id,
                    &row.task_type,
                    false,
                    &by_id[&row.task_id].message,
                );
                roots.push((row.task_id, message));
            }
        }
        if !roots.is_empty() {
            flow::propagate(&mut *tx, &self.schema, roots, false, now).await?;
        }
        let mut stats = Stats::default();
        for row in &rows {
            stats.add(&row.task_type, by_id[&row.task_id].millis);
        }
        self.write_stats(&mut *tx, stats, now).await?;
        Ok(rows.iter().map(|r| r.task_id).collect())
    }

    /// Which of the ids (a JSON array of hex ids) this worker recorded as succeeded
    /// (`Store::succeeded_here`), by the results table's primary key.
    pub(crate) async fn succeeded_here(&self, ids: &str) -> Result<Vec<Uuid>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT task_id FROM {} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))
             AND task_status = $2 AND task_last_locked_by = $3",
            self.schema.sqlite.results
        ))
        .bind(ids)
        .bind(crate::model::JobStatus::Processed as i32)
        .bind(&self.worker_id)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Leases as a JSON array of `[id, attempt]` rows.
pub(super) fn lease_list(leases: &[Lease]) -> String {
    let rows: Vec<(String, i32)> = leases
        .iter()
        .map(|l| (l.id.simple().to_string(), l.attempt))
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
}

/// A claimed row as the claim's last statement gives it, in one JSON array of them: the
/// id in hex, then `ClaimedJob`'s columns in order with the lock handle before the
/// timeout. One text value for the whole claim instead of a row per job: each row of a
/// result crosses from sqlx's SQLite thread on its own, with its values copied, while the
/// claim holds the write lock (about half of what a claim cost).
pub(super) type ClaimedRow = (
    String,
    String,
    Option<String>,
    i32,
    i32,
    i32,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<i32>,
);

/// The jobs of a claim's JSON array (`ClaimedRow`), each with its lock handle. A row sk
/// cannot read (a value another producer wrote that no check refused) comes back
/// [`ClaimedJob::unreadable`], alone: the rest of the claim runs.
pub(super) fn claimed(json: &str) -> Result<Vec<(i64, ClaimedJob)>> {
    match serde_json::from_str::<Vec<ClaimedRow>>(json) {
        Ok(rows) => rows.into_iter().map(claimed_job).collect(),
        Err(_) => {
            let rows: Vec<serde_json::Value> = from_json(json, "claimed rows")?;
            Ok(rows
                .into_iter()
                .filter_map(
                    |row| match serde_json::from_value::<ClaimedRow>(row.clone()) {
                        Ok(row) => claimed_job(row)
                            .map_err(|e| super::super::unleasable(&e))
                            .ok(),
                        Err(e) => unreadable_row(&row, &e)
                            .map_err(|e| super::super::unleasable(&e))
                            .ok(),
                    },
                )
                .collect())
        }
    }
}

/// A claimed row of a claim's JSON array that does not decode as a `ClaimedRow`: its id
/// (0), task type (1), attempt (3) and lock handle (11), with `error` as its reason.
pub(super) fn unreadable_row(
    row: &serde_json::Value,
    error: &serde_json::Error,
) -> Result<(i64, ClaimedJob)> {
    let id = row[0]
        .as_str()
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(|| undecodable(format!("a claimed row's id: {row}")))?;
    let lease = (
        row[1].as_str(),
        row[3].as_i64().and_then(|a| i32::try_from(a).ok()),
        row[11].as_i64(),
    );
    let (Some(task_type), Some(attempt), Some(handle)) = lease else {
        return Err(undecodable(format!(
            "claimed job {id}'s task type, attempt or lock handle: {row}"
        )));
    };
    Ok((
        handle,
        ClaimedJob::unreadable(id, task_type.to_owned(), attempt, error.to_string()),
    ))
}

/// One decoded claimed row as a job, with its lock handle.
pub(super) fn claimed_job(row: ClaimedRow) -> Result<(i64, ClaimedJob)> {
    let (
        id,
        task_type,
        task_payload,
        task_attempt,
        task_max_attempts,
        task_priority,
        task_queue,
        posted,
        task_tenant,
        task_correlation_id,
        task_metadata,
        handle,
        task_timeout_ms,
        task_waiting_on,
    ) = row;
    let task_id = Uuid::parse_str(&id).map_err(|e| undecodable(format!("claimed id {id}: {e}")))?;
    let task_posted_at_ts = match DateTime::parse_from_rfc3339(&posted) {
        Ok(at) => at.with_timezone(&Utc),
        // The table's check makes this rare: the job ends alone, with the reason.
        Err(e) => {
            let reason = format!("its posting time {posted:?} is not a time: {e}");
            let job = ClaimedJob::unreadable(task_id, task_type, task_attempt, reason);
            return Ok((handle, job));
        }
    };
    let job = ClaimedJob {
        task_id,
        task_type,
        task_payload,
        task_attempt,
        task_max_attempts,
        task_priority,
        task_queue,
        task_posted_at_ts,
        task_tenant,
        task_correlation_id,
        task_metadata,
        task_timeout_ms,
        task_waiting_on,
        claimed_at: None,
        unreadable: None,
    };
    Ok((handle, job))
}

/// An integer read wide, held to `i32` (the range every reader of it takes).
pub(super) fn int4(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

/// A value sk read back and cannot decode, as sqlx reports one.
pub(super) fn undecodable(what: String) -> Error {
    Error::Database(sqlx::Error::Decode(what.into()))
}

/// A JSON value a statement built, decoded; `what` names it in the error.
pub(super) fn from_json<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| undecodable(format!("{what}: {e}")))
}

/// The row a batch of statements answers with, from its last statement.
pub(super) fn last_row<'r>(
    rows: &'r [sqlx::sqlite::SqliteRow],
    what: &str,
) -> Result<&'r sqlx::sqlite::SqliteRow> {
    rows.last()
        .ok_or_else(|| undecodable(format!("{what} returned no row")))
}

/// The database file of a connection's options.
pub(crate) fn address(options: &SqliteConnectOptions) -> String {
    format!("sqlite:{}", options.get_filename().display())
}

crate::store::worker_rows::worker_rows_of!(SqliteStore);
