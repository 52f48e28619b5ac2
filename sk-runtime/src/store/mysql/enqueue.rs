//! Enqueue: one job, a batch (uniform or not, in statements of a bounded size), a job with a unique key and the keys it takes.

use super::*;

/// Refuses a schema whose table names would pass MySQL's 64 characters.
pub(super) fn check_length(schema: &Schema) -> Result<()> {
    let prefix = schema.flat_prefix();
    if prefix.len() + LONGEST_NAME > 64 {
        return Err(Error::invalid(
            "schema",
            format!(
                "on MySQL the tables are named {prefix}…, which leaves too little of MySQL's 64 characters: keep the schema name and prefix under {} characters together",
                64 - LONGEST_NAME
            ),
        ));
    }
    Ok(())
}

/// Inserts one job without a unique key; `None` when a job with its id exists. One
/// statement and one row: as on PostgreSQL, the job is its queue row alone until its
/// first outcome writes its results row (the job list and the counts read the queue).
pub(crate) async fn enqueue_one(
    conn: &mut MySqlConnection,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let mode = job.unique_mode.map(|m| m as i16);
    match bind_new!(sqlx::query(&schema.mysql.insert_plain), job, dt(now), mode)
        .execute(&mut *conn)
        .await
    {
        Ok(_) => {
            wake();
            Ok(Some(job.id))
        }
        Err(e) if duplicate(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Inserts one job with a unique key of mode skip, restart or replace; the id of the new
/// or live job, whether it is new, and whether the live job is running.
///
/// The key lives in `unique_keys_t` (migration 8). The live job's queue row is locked
/// before its key's row, the order in which its finalization takes them (the queue row's
/// delete removes the key in a trigger), so the two do not deadlock; only a key that
/// changes hands between the first read and the lock is taken the other way round.
pub(crate) async fn enqueue_unique(
    conn: &mut MySqlConnection,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    let key = job.unique_key.as_deref().unwrap_or_default();
    let sql = &schema.mysql;
    let mut tx = conn.begin().await?;
    let seen: Option<Uuid> = sqlx::query_scalar(&format!(
        "SELECT task_id FROM {} WHERE task_unique_key = ?",
        sql.unique_keys
    ))
    .bind(key)
    .fetch_optional(&mut *tx)
    .await?;
    let mut running = None;
    if let Some(seen) = seen {
        running = running_of(&mut tx, schema, seen).await?;
    }
    let holder = take_keys(&mut tx, schema, &[(key, job.id)]).await?[0];
    if holder == job.id {
        bind_new!(
            sqlx::query(&sql.insert_queue),
            job,
            dt(now),
            Some(mode as i16)
        )
        .execute(&mut *tx)
        .await?;
        bind_result!(
            sqlx::query(&sql.insert_result),
            job,
            dt(now),
            Some(mode as i16)
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        wake();
        return Ok((job.id, true, false));
    }
    // The live job read first holds the key (its row is locked), or the key changed
    // hands in between and the holder's row is locked now.
    let running = match running {
        Some(running) if seen == Some(holder) => running,
        _ => running_of(&mut tx, schema, holder).await?.ok_or_else(|| {
            Error::invalid(
                "unique key",
                format!("the job {holder} holding the key {key:?} is not in the queue"),
            )
        })?,
    };
    let mode = mode as i16;
    sqlx::query(&sql.enqueue_unique)
        .bind(mode)
        .bind(mode)
        .bind(mode)
        .bind(&job.payload)
        .bind(mode)
        .bind(dt(job.run_at))
        .bind(job.every_ms)
        .bind(holder)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    wake();
    Ok((holder, false, running))
}

/// Locks a live job's queue row; whether it is running, `None` if it is not in the queue.
pub(super) async fn running_of(
    conn: &mut MySqlConnection,
    schema: &Schema,
    id: Uuid,
) -> Result<Option<bool>> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT task_locked_by IS NOT NULL FROM {} WHERE task_id = ? FOR UPDATE",
        schema.mysql.queue
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?)
}

/// Takes the unique keys of `wanted` (key, id) that no live job holds, in the caller's
/// transaction: a key goes to the first id that asks for it. The holder of each key, in
/// `wanted`'s order; the keys' rows stay locked until the transaction ends. A key is free
/// once its job leaves the queue (migration 8's trigger removes it with the queue row).
///
/// Keys are matched by the database, as its unique index compares them: under
/// `utf8mb4_bin`, MariaDB's padding collation, `"k"` and `"k "` are one key, and the
/// holder read back may be spelt as the other.
pub(super) async fn take_keys(
    conn: &mut MySqlConnection,
    schema: &Schema,
    wanted: &[(&str, Uuid)],
) -> Result<Vec<Uuid>> {
    let table = &schema.mysql.unique_keys;
    let mut held = Vec::with_capacity(wanted.len());
    for part in wanted.chunks(ROWS_PER_STATEMENT) {
        let mut query =
            QueryBuilder::<MySql>::new(format!("INSERT INTO {table} (task_unique_key, task_id) "));
        query.push_values(part, |mut row, (key, id)| {
            row.push_bind(*key).push_bind(*id);
        });
        query.push(" ON DUPLICATE KEY UPDATE task_id = task_id");
        query.build().execute(&mut *conn).await?;
        let keys: Vec<&str> = part.iter().map(|(key, _)| *key).collect();
        let keys = serde_json::to_string(&keys).expect("a list of strings serializes");
        let holders: Vec<Uuid> = sqlx::query_scalar(&format!(
            "SELECT u.task_id FROM JSON_TABLE(?, '$[*]' COLUMNS (i FOR ORDINALITY,
                k VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) w
             JOIN {table} u ON u.task_unique_key = w.k ORDER BY w.i FOR UPDATE"
        ))
        .bind(keys)
        .fetch_all(&mut *conn)
        .await?;
        // Every key has its row now, locked by this transaction.
        if holders.len() != part.len() {
            return Err(sqlx::Error::Protocol(format!(
                "{} of {} unique keys read back after taking them",
                holders.len(),
                part.len()
            ))
            .into());
        }
        held.extend(holders);
    }
    Ok(held)
}

/// Inserts many jobs, in statements of up to [`ROWS_PER_STATEMENT`] rows, all in one
/// transaction (or a savepoint of the caller's); the ids in order (a duplicate key's place
/// holds the live job's id, or the first of the batch with that key).
pub(crate) async fn enqueue_many(
    conn: &mut MySqlConnection,
    schema: &Schema,
    jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    if super::super::uniform(&jobs) {
        return enqueue_uniform(conn, schema, &jobs, now).await;
    }
    let keyed = jobs.iter().any(|j| j.unique_key.is_some());
    let mut tx = conn.begin().await?;
    if !keyed {
        // Queue rows only, as `enqueue_one`.
        for chunk in chunks(&jobs) {
            queue_rows(chunk, schema, now, false)
                .build()
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        wake();
        return Ok(jobs.iter().map(|j| j.id).collect());
    }
    // With keys (mode skip), the keys first: a key a live job (or an earlier job of the
    // batch) holds leaves that job as it is, and only the jobs that hold their keys, or
    // have none, go in, each with its results row.
    let wanted: Vec<(&str, Uuid)> = jobs
        .iter()
        .filter_map(|j| Some((j.unique_key.as_deref()?, j.id)))
        .collect();
    let held = take_keys(&mut tx, schema, &wanted).await?;
    let holder: HashMap<Uuid, Uuid> = wanted.iter().map(|(_, id)| *id).zip(held).collect();
    let id_of = |j: &NewJob| holder.get(&j.id).copied().unwrap_or(j.id);
    let new: Vec<&NewJob> = jobs.iter().filter(|j| id_of(j) == j.id).collect();
    for chunk in chunks(&new) {
        queue_rows(chunk, schema, now, true)
            .build()
            .execute(&mut *tx)
            .await?;
    }
    for chunk in chunks(&new) {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "INSERT INTO {} ({RESULT_COLUMNS}) ",
            schema.mysql.results
        ));
        query.push_values(chunk, |mut row, job| {
            row.push_bind(job.id)
                .push_bind(&*job.task_type)
                .push_bind(&job.source)
                .push_bind(&job.queue)
                .push_bind(job.priority)
                .push_bind(&job.unique_key)
                .push_bind(job.unique_key.as_ref().map(|_| 1i16))
                .push_bind(dt(now))
                .push_bind(&job.tenant)
                .push_bind(&job.correlation_id)
                .push_bind(&job.metadata)
                .push_unseparated(", 1");
        });
        query.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    wake();
    Ok(jobs.iter().map(id_of).collect())
}

/// `enqueue_many` of a batch whose jobs differ only in id and payload (`store::uniform`):
/// per statement, the ids and payloads travel as one JSON array read by `JSON_TABLE`, in
/// its order (so the lock handles follow the caller's), and the rest is bound once. Queue
/// rows only, as `enqueue_one`.
pub(super) async fn enqueue_uniform(
    conn: &mut MySqlConnection,
    schema: &Schema,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let job = &jobs[0];
    let mut tx = conn.begin().await?;
    for chunk in chunks_up_to(jobs, JSON_ROWS_PER_STATEMENT) {
        let rows: Vec<(String, &str)> = chunk
            .iter()
            .map(|j| (j.id.simple().to_string(), j.payload.as_str()))
            .collect();
        let rows = serde_json::to_string(&rows).expect("a list of string pairs serializes");
        sqlx::query(&format!(
            "INSERT INTO {} ({NEW_COLUMNS})
             SELECT UNHEX(j.id), ?, ?, j.payload, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, 0
             FROM JSON_TABLE(?, '$[*]' COLUMNS (ord FOR ORDINALITY, id CHAR(32) PATH '$[0]',
                payload LONGTEXT PATH '$[1]')) j
             ORDER BY j.ord",
            schema.mysql.queue
        ))
        .bind(&*job.task_type)
        .bind(&job.source)
        .bind(job.priority)
        .bind(dt(now))
        .bind(dt(job.run_at))
        .bind(&job.queue)
        .bind(job.max_attempts)
        .bind(&job.tenant)
        .bind(&job.correlation_id)
        .bind(&job.metadata)
        .bind(job.every_ms)
        .bind(job.timeout_ms)
        .bind(&rows)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    wake();
    Ok(jobs.iter().map(|j| j.id).collect())
}

/// A multi-row insert of queue rows; with `keyed`, of jobs that took their keys
/// (`take_keys`), which get their results rows in the same transaction (without, a job's
/// first outcome writes it). A job whose id is in the queue already is left as it is.
pub(super) fn queue_rows<'a, J: Borrow<NewJob>>(
    jobs: &'a [J],
    schema: &Schema,
    now: DateTime<Utc>,
    keyed: bool,
) -> QueryBuilder<'a, MySql> {
    let mut query = QueryBuilder::<MySql>::new(format!(
        "INSERT INTO {} ({NEW_COLUMNS}) ",
        schema.mysql.queue
    ));
    query.push_values(jobs, |mut row, job| {
        let job = job.borrow();
        row.push_bind(job.id)
            .push_bind(&*job.task_type)
            .push_bind(&job.source)
            .push_bind(&job.payload)
            .push_bind(job.priority)
            .push_bind(dt(now))
            .push_bind(dt(job.run_at))
            .push_bind(&job.queue)
            .push_bind(job.max_attempts)
            .push_bind(&job.tenant)
            .push_bind(&job.correlation_id)
            .push_bind(&job.metadata)
            .push_bind(&job.unique_key)
            .push_bind(job.unique_key.as_ref().map(|_| 1i16))
            .push_bind(job.every_ms)
            .push_bind(job.timeout_ms)
            .push_unseparated(if keyed { ", 1" } else { ", 0" });
    });
    if keyed {
        query.push(" ON DUPLICATE KEY UPDATE task_unique_key = task_unique_key");
    }
    query
}

/// Splits a batch (of jobs or references to them) by row count and payload size (the
/// limits above).
pub(super) fn chunks<J: Borrow<NewJob>>(jobs: &[J]) -> Vec<&[J]> {
    chunks_up_to(jobs, ROWS_PER_STATEMENT)
}

/// `chunks` of at most `rows` rows.
pub(super) fn chunks_up_to<J: Borrow<NewJob>>(jobs: &[J], rows: usize) -> Vec<&[J]> {
    super::super::parts(jobs, rows, BYTES_PER_STATEMENT, |job| {
        job.borrow().payload.len()
    })
    .into_iter()
    .map(|part| &jobs[part])
    .collect()
}
