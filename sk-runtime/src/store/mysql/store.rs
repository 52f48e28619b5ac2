//! The worker's store on MySQL/MariaDB: its connections, the leases it writes, and the rows an outcome reads back.

use super::*;
use crate::model::from_row;
use crate::model::status::PROCESSED;

from_row! {
/// A queue row as it was when its run ended (`QUEUE_ROW`).
pub(super) struct Row {
    pub(super) task_lock_handle_id: i64 = "task_lock_handle_id",
    pub(super) task_id: Uuid = "task_id",
    pub(super) task_type: String = "task_type",
    pub(super) task_source: String = "task_source",
    pub(super) task_queue: String = "task_queue",
    pub(super) task_priority: i32 = "task_priority",
    pub(super) task_posted_at_ts: DateTime<Utc> = "task_posted_at_ts",
    pub(super) task_tenant: Option<String> = "task_tenant",
    pub(super) task_correlation_id: Option<String> = "task_correlation_id",
    pub(super) task_metadata: Option<String> = "task_metadata",
    pub(super) task_claimed_at_ts: Option<DateTime<Utc>> = "task_claimed_at_ts",
    pub(super) task_lost_attempts: Option<String> = "task_lost_attempts",
    pub(super) task_payload: Option<String> = "task_payload",
    pub(super) task_max_attempts: i32 = "task_max_attempts",
    pub(super) task_unique_key: Option<String> = "task_unique_key",
    pub(super) task_unique_mode: Option<i16> = "task_unique_mode",
    pub(super) task_rerun: bool = "task_rerun",
    pub(super) task_every_ms: Option<i64> = "task_every_ms",
    pub(super) task_timeout_ms: Option<i64> = "task_timeout_ms",
    /// Other jobs wait on it.
    pub(super) task_dependants: bool = "task_dependants",
    /// It waited on others (their outputs are its inputs).
    pub(super) task_fed: bool = "task_fed",
    /// Its results row exists already.
    pub(super) task_has_result: bool = "task_has_result",
}
}

impl LeasedRow for Row {
    type Time = DateTime<Utc>;
    fn task_id(&self) -> Uuid {
        self.task_id
    }
    fn lost_attempts(&self) -> Option<&str> {
        self.task_lost_attempts.as_deref()
    }
    fn claimed_at(&self) -> Option<DateTime<Utc>> {
        self.task_claimed_at_ts
    }
    fn parse_time(text: &str) -> Option<DateTime<Utc>> {
        text.parse().ok()
    }
    fn time_text(time: DateTime<Utc>) -> String {
        ts(time)
    }
}

impl Row {
    /// The bytes of text its results row takes from it (the payload aside).
    pub(super) fn bytes(&self) -> usize {
        let len = |text: &Option<String>| text.as_ref().map_or(0, String::len);
        self.task_type.len()
            + self.task_source.len()
            + self.task_queue.len()
            + len(&self.task_tenant)
            + len(&self.task_correlation_id)
            + len(&self.task_metadata)
    }

    /// Whether a job is posted after its outcome: a restart, or a periodic job's next run.
    pub(super) fn posts_again(&self) -> bool {
        self.task_rerun || self.task_every_ms.is_some()
    }

    /// Whether its success writes a results row though the success has no use for one
    /// (`Success::keep`): one exists, or its key, next run or workflow needs it.
    fn needs_result(&self) -> bool {
        self.task_has_result
            || self.task_unique_key.is_some()
            || self.posts_again()
            || self.task_dependants
            || self.task_fed
    }
}

/// Per task type: total and count, fastest, longest and last run time (seed 001).
#[derive(Default)]
pub(super) struct Stats(pub(super) HashMap<String, (i64, i64, i64, i64, i64)>);

impl Stats {
    pub(super) fn add(&mut self, task_type: &str, ms: i64) {
        let e = self
            .0
            .entry(task_type.to_owned())
            .or_insert((0, 0, i64::MAX, i64::MIN, 0));
        e.0 += ms;
        e.1 += 1;
        e.2 = e.2.min(ms);
        e.3 = e.3.max(ms);
        e.4 = ms;
    }
}

/// The failed attempts recorded for `id` followed by `more`, as a JSON array.
pub(super) async fn errors_with(
    tx: &mut MySqlConnection,
    schema: &Schema,
    id: Uuid,
    more: Vec<serde_json::Value>,
) -> Result<String> {
    let recorded: Option<String> = sqlx::query_scalar(&format!(
        "SELECT task_errors FROM {} WHERE task_id = ?",
        schema.mysql.results
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let mut all: Vec<serde_json::Value> = recorded
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    all.extend(more);
    Ok(serde_json::Value::Array(all).to_string())
}

/// The worker's view of the store on MySQL.
#[derive(Clone)]
pub(crate) struct MySqlStore {
    pub(crate) pool: MySqlPool,
    pub(crate) schema: Schema,
    pub(crate) worker_id: String,
    /// The bound of each call (`store::bound`).
    pub(crate) bounds: super::super::bound::Bounds,
    /// Set once the queue table has the fair claims' index (`fair_index`).
    pub(crate) fair_index: std::sync::Arc<tokio::sync::OnceCell<()>>,
}

/// `host:port` (or the socket path) and database of a connection's options.
pub(crate) fn address(options: &MySqlConnectOptions) -> String {
    let place = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    match options.get_database() {
        Some(db) => format!("{place}/{db}"),
        None => place,
    }
}

/// `[id, attempt]` pairs in a row-constructor `IN` list.
pub(super) fn push_leases(query: &mut QueryBuilder<'_, MySql>, leases: &[Lease]) {
    query.push("(task_id, task_attempt) IN (");
    let mut list = query.separated(", ");
    for lease in leases {
        list.push("(")
            .push_bind_unseparated(lease.id)
            .push_unseparated(", ")
            .push_bind_unseparated(lease.attempt)
            .push_unseparated(")");
    }
    query.push(")");
}

impl MySqlStore {
    pub(super) fn sql(&self) -> &Statements {
        &self.schema.mysql
    }

    /// Where the pool connects, for messages.
    pub(crate) fn address(&self) -> String {
        address(&self.pool.connect_options())
    }

    /// The server's `max_connections` and the connections open now.
    pub(crate) async fn connection_room(&self) -> Result<(i64, i64)> {
        let mut conn = self.acquire().await?;
        let limit: i64 = sqlx::query_scalar("SELECT CAST(@@max_connections AS SIGNED)")
            .fetch_one(&mut *conn)
            .await?;
        // `SHOW STATUS` answers on MariaDB and MySQL 8 alike (their tables differ).
        let (_, open): (String, String) =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
                .fetch_one(&mut *conn)
                .await?;
        Ok((limit, open.parse().unwrap_or(0)))
    }

    /// A pooled connection, or within [`ACQUIRE_WAIT`] an error that says why there is none.
    pub(super) async fn acquire(&self) -> Result<crate::store::bound::Guarded<MySql>> {
        match tokio::time::timeout(ACQUIRE_WAIT, self.pool.acquire()).await {
            Ok(Ok(conn)) => Ok(crate::store::bound::Guarded::new(conn)),
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(match self.probe().await {
                Err(ProbeFailure::Transient(e) | ProbeFailure::Permanent(e)) => e,
                Ok(()) => super::super::pool_timed_out(
                    ACQUIRE_WAIT,
                    self.pool.size(),
                    self.pool.options().get_max_connections(),
                ),
            }),
            Ok(Err(sqlx::Error::Io(io))) => Err(Error::Connect {
                address: self.address(),
                cause: io.to_string(),
            }),
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// Posts a restart or a periodic job's next run after `row`'s outcome (as on
    /// PostgreSQL: a new job with the same key, payload and period). Whether it posted one.
    pub(super) async fn again(
        &self,
        tx: &mut MySqlConnection,
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
        sqlx::query(&self.sql().insert_result)
            .bind(id)
            .bind(&row.task_type)
            .bind(&row.task_source)
            .bind(&row.task_queue)
            .bind(row.task_priority)
            .bind(&row.task_unique_key)
            .bind(row.task_unique_mode)
            .bind(dt(now))
            .bind(&row.task_tenant)
            .bind(&row.task_correlation_id)
            .bind(&row.task_metadata)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&self.sql().insert_queue)
            .bind(id)
            .bind(&row.task_type)
            .bind(&row.task_source)
            .bind(&row.task_payload)
            .bind(row.task_priority)
            .bind(dt(now))
            .bind(dt(run_at))
            .bind(&row.task_queue)
            .bind(row.task_max_attempts)
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
        tx: &mut MySqlConnection,
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
                .bind(n)
                .bind(fastest)
                .bind(longest)
                .bind(total)
                .bind(n)
                .bind(last)
                .bind(dt(now))
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// The queue rows this worker holds under these claims, locked (fenced: a row whose
    /// attempt moved on is not this claim's).
    pub(super) async fn held(
        &self,
        tx: &mut MySqlConnection,
        leases: &[Lease],
    ) -> Result<Vec<Row>> {
        // Through the job-id index, in id order, as the client's single-job statements
        // (`WHERE task_id = ?`) do: a scan of the primary key would lock it before the
        // id index, the other order, and a retry or cancel of a job in the batch would
        // deadlock with it.
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT {QUEUE_ROW} FROM {} FORCE INDEX ({}tasks_queue_task_id) WHERE task_locked_by = ",
            self.sql().queue,
            self.schema.flat_prefix()
        ));
        query.push_bind(&self.worker_id).push(" AND ");
        push_leases(&mut query, leases);
        query.push(" ORDER BY task_id FOR UPDATE");
        Ok(query.build_query_as().fetch_all(&mut *tx).await?)
    }

    /// Deletes queue rows by lock handle.
    pub(super) async fn delete(&self, tx: &mut MySqlConnection, rows: &[&Row]) -> Result<()> {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "DELETE FROM {} WHERE task_lock_handle_id IN (",
            self.sql().queue
        ));
        let mut list = query.separated(", ");
        for row in rows {
            list.push_bind(row.task_lock_handle_id);
        }
        query.push(")");
        query.build().execute(&mut *tx).await?;
        Ok(())
    }

    /// Records one successful run inside the job's own transaction (the caller commits);
    /// false when the lease was lost (fenced), and the caller then rolls back.
    pub(crate) async fn complete_in(
        &self,
        tx: &mut MySqlConnection,
        done: &Success,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let (held, _posted) = self
            .complete_on(tx, std::slice::from_ref(done), now)
            .await?;
        // A rerun or next run it posted is found by the next poll.
        Ok(!held.is_empty())
    }

    /// The statements of a completion, in a transaction: the ids whose lease was held,
    /// and whether a job was posted (a rerun, a periodic job's next run).
    pub(super) async fn complete_on(
        &self,
        tx: &mut MySqlConnection,
        done: &[Success],
        now: DateTime<Utc>,
    ) -> Result<(Vec<Uuid>, bool)> {
        let leases: Vec<Lease> = done.iter().map(|s| s.lease).collect();
        let by_id: HashMap<Uuid, &Success> = done.iter().map(|s| (s.lease.id, s)).collect();
        let rows = self.held(&mut *tx, &leases).await?;
        if rows.is_empty() {
            return Ok((Vec::new(), false));
        }
        self.delete(&mut *tx, &rows.iter().collect::<Vec<_>>())
            .await?;
        // Rows with lost attempts need their whole list of failed attempts written;
        // the rest go in one statement.
        let (lost, common): (Vec<&Row>, Vec<&Row>) =
            rows.iter().partition(|r| r.task_lost_attempts.is_some());
        // Under a retention of zero, a success nothing needs leaves no results row.
        let common: Vec<&Row> = common
            .into_iter()
            .filter(|r| {
                let s = by_id[&r.task_id];
                s.keep || s.output.is_some() || r.needs_result()
            })
            .collect();
        let mut stats = Stats::default();
        let size =
            |row: &&Row| by_id[&row.task_id].output.as_ref().map_or(0, String::len) + row.bytes();
        for part in super::super::parts(&common, ROWS_PER_STATEMENT, BYTES_PER_STATEMENT, size) {
            let mut query = QueryBuilder::<MySql>::new(&self.sql().success);
            query.push(" ");
            query.push_values(&common[part], |mut v, row| {
                let s = by_id[&row.task_id];
                v.push_bind(row.task_id)
                    .push_bind(&row.task_type)
                    .push_bind(&row.task_source)
                    .push_bind(&row.task_queue)
                    .push_bind(row.task_priority)
                    .push_bind(dt(row.task_posted_at_ts))
                    .push_bind(&row.task_tenant)
                    .push_bind(&row.task_correlation_id)
                    .push_bind(&row.task_metadata)
                    .push(PROCESSED)
                    .push_bind(s.millis)
                    .push_bind(dt(now))
                    .push_bind(&self.worker_id)
                    .push_bind(s.output.as_deref())
                    .push_bind(dt(row.task_claimed_at_ts))
                    .push_bind(dt(row.task_claimed_at_ts))
                    .push_bind(&row.task_payload);
            });
            query.push(format!(" ON DUPLICATE KEY UPDATE {SUCCESS_UPDATE}"));
            query.build().execute(&mut *tx).await?;
        }
        for row in lost {
            let s = by_id[&row.task_id];
            let lost = row.lost();
            let first = row.first_started(&lost);
            let lost_count = lost.len() as i64;
            let errors = errors_with(&mut *tx, &self.schema, row.task_id, lost).await?;
            sqlx::query(&self.sql().success_again)
                .bind(row.task_id)
                .bind(&row.task_type)
                .bind(&row.task_source)
                .bind(&row.task_queue)
                .bind(row.task_priority)
                .bind(dt(row.task_posted_at_ts))
                .bind(&row.task_tenant)
                .bind(&row.task_correlation_id)
                .bind(&row.task_metadata)
                .bind(s.millis)
                .bind(dt(now))
                .bind(&self.worker_id)
                .bind(s.output.as_deref())
                .bind(dt(first))
                .bind(dt(row.task_claimed_at_ts))
                .bind(lost_count)
                .bind(errors)
                .bind(&row.task_payload)
                .execute(&mut *tx)
                .await?;
        }
        // Restarts and periodic jobs' next runs.
        let mut posted = false;
        for row in rows.iter().filter(|r| r.posts_again()) {
            posted |= self.again(&mut *tx, row, now).await?;
        }
        for row in &rows {
            stats.add(&row.task_type, by_id[&row.task_id].millis);
        }
        self.write_stats(&mut *tx, stats, now).await?;
        // Jobs others wait on, and jobs that waited.
        let outputs: Vec<(Uuid, Option<&str>)> = rows
            .iter()
            .filter(|r| r.task_dependants)
            .map(|r| (r.task_id, by_id[&r.task_id].output.as_deref()))
            .collect();
        let fed: Vec<Uuid> = rows
            .iter()
            .filter(|r| r.task_fed)
            .map(|r| r.task_id)
            .collect();
        if !outputs.is_empty() || !fed.is_empty() {
            posted |= flow::settle(&mut *tx, &self.schema, &outputs, &fed, now).await?;
        }
        Ok((rows.iter().map(|r| r.task_id).collect(), posted))
    }

    /// The statements of `fail`, in a transaction: the ids whose lease was held.
    pub(super) async fn fail_on(
        &self,
        tx: &mut MySqlConnection,
        failures: &[Failure],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>> {
        let leases: Vec<Lease> = failures.iter().map(|f| f.lease).collect();
        let by_id: HashMap<Uuid, &Failure> = failures.iter().map(|f| (f.lease.id, f)).collect();
        let rows = self.held(&mut *tx, &leases).await?;
        if rows.is_empty() {
            return Ok(HashSet::new());
        }
        let (retried, last): (Vec<&Row>, Vec<&Row>) = rows
            .iter()
            .partition(|r| by_id[&r.task_id].retry_at.is_some());
        if !last.is_empty() {
            self.delete(&mut *tx, &last).await?;
        }
        if !retried.is_empty() {
            // The rows wait again, each until its retry time; their lost attempts move to
            // the results rows.
            let mut query = QueryBuilder::<MySql>::new(format!(
                "UPDATE {} SET task_locked_until_ts = CASE task_lock_handle_id",
                self.sql().queue
            ));
            for row in &retried {
                query
                    .push(" WHEN ")
                    .push_bind(row.task_lock_handle_id)
                    .push(" THEN ")
                    .push_bind(dt(by_id[&row.task_id].retry_at));
            }
            query.push(
                " END, task_locked_by = NULL, task_lost_attempts = NULL, task_has_result = 1
                 WHERE task_lock_handle_id IN (",
            );
            let mut list = query.separated(", ");
            for row in &retried {
                list.push_bind(row.task_lock_handle_id);
            }
            query.push(")");
            query.build().execute(&mut *tx).await?;
        }
        // Each results row's list of failed attempts gets this one (and the lost ones).
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT task_id, task_errors FROM {} WHERE task_id IN (",
            self.schema.mysql.results
        ));
        let mut list = query.separated(", ");
        for row in &rows {
            list.push_bind(row.task_id);
        }
        query.push(")");
        let recorded: HashMap<Uuid, Option<String>> = query
            .build_query_as::<(Uuid, Option<String>)>()
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
        let values = super::super::failed_runs(&rows, &by_id, &recorded, &self.worker_id, ts(now));
        let size = |run: &super::super::FailedRun<'_, Row>| {
            let f = run.failure;
            let payload = match f.retry_at {
                None => run.row.task_payload.as_ref().map_or(0, String::len),
                Some(_) => 0,
            };
            run.row.bytes()
                + payload
                + run.log.len()
                + f.kind.len()
                + f.message.len()
                + f.detail.as_ref().map_or(0, String::len)
        };
        for part in super::super::parts(&values, ROWS_PER_STATEMENT, BYTES_PER_STATEMENT, size) {
            let mut query = QueryBuilder::<MySql>::new(&self.sql().failure);
            query.push(" ");
            query.push_values(&values[part], |mut v, run| {
                let (row, f) = (run.row, run.failure);
                let last_run = f.retry_at.is_none();
                v.push_bind(row.task_id)
                    .push_bind(&row.task_type)
                    .push_bind(&row.task_source)
                    .push_bind(&row.task_queue)
                    .push_bind(row.task_priority)
                    .push_bind(dt(row.task_posted_at_ts))
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
                    .push_bind(dt(last_run.then_some(now)))
                    // A job that failed for good keeps its payload, to inspect or re-post.
                    .push_bind(if last_run {
                        row.task_payload.as_deref()
                    } else {
                        None
                    })
                    .push_bind(&self.worker_id)
                    .push_bind(run.log.as_str())
                    .push("NULL")
                    .push_bind(dt(run.first))
                    .push_bind(dt(row.task_claimed_at_ts))
                    .push_bind(row.task_max_attempts)
                    .push_bind(row.task_timeout_ms);
            });
            query.push(format!(" ON DUPLICATE KEY UPDATE {FAILURE_UPDATE}"));
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
            "SELECT task_id FROM {} WHERE task_id IN
                (SELECT UNHEX(id) FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS ids)
             AND task_status = ? AND task_last_locked_by = ?",
            self.schema.mysql.results
        ))
        .bind(ids)
        .bind(crate::model::JobStatus::Processed as i32)
        .bind(&self.worker_id)
        .fetch_all(&self.pool)
        .await?)
    }
}

crate::store::worker_rows::worker_rows_of!(MySqlStore);
