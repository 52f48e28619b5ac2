//! The worker's completions on PostgreSQL: a batch of successes in one statement and its
//! workflow step, one inside a job's own transaction, and, after a COMMIT whose reply was
//! lost, which of them committed (`in_doubt`, `pg_xact_status`).

use super::*;

/// A completion statement's row: the job, whether others wait on it, whether it waited,
/// and the transaction's id.
type Completed = (Uuid, bool, bool, i64);

/// The rows of `completed` as `PgStore::settle` takes them.
fn settling(completed: &[Completed]) -> Vec<(Uuid, bool, bool)> {
    completed.iter().map(|&(id, d, f, _)| (id, d, f)).collect()
}

impl PgStore {
    /// Records one successful run inside the job's own transaction (the caller commits);
    /// false when the lease was lost (fenced), and the caller then rolls back.
    pub(crate) async fn complete_in(
        &self,
        tx: &mut PgConnection,
        done: &Success,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        (&mut *tx).execute("SET LOCAL enable_seqscan = off").await?;
        let held: Vec<Completed> = sqlx::query_as(&self.schema.sql.complete)
            .bind([done.lease.id])
            .bind([done.lease.attempt])
            .bind([done.millis])
            .bind(&self.worker_id)
            .bind(now)
            .bind([done.output.as_deref()])
            .bind(self.schema.done_channel())
            .bind([done.keep])
            .fetch_all(self.on(tx))
            .await
            .map_err(|e| self.lost(e))?;
        let held = self.settle(tx, &[done], settling(&held), now).await?;
        Ok(!held.is_empty())
    }

    /// The workflow step of a completion (`flow::settle`), for the `held` rows of the
    /// complete statement that others wait on or that waited; the ids held.
    async fn settle(
        &self,
        tx: &mut PgConnection,
        done: &[&Success],
        held: Vec<(Uuid, bool, bool)>,
        now: DateTime<Utc>,
    ) -> Result<Vec<Uuid>> {
        if held.iter().any(|(_, dependants, fed)| *dependants || *fed) {
            let outputs: Vec<(Uuid, Option<&str>)> = held
                .iter()
                .filter(|(_, dependants, _)| *dependants)
                .filter_map(|(id, _, _)| {
                    let success = done.iter().find(|s| s.lease.id == *id)?;
                    Some((*id, success.output.as_deref()))
                })
                .collect();
            let fed: Vec<Uuid> = held.iter().filter(|h| h.2).map(|h| h.0).collect();
            flow::settle(tx, &self.schema, &outputs, &fed, now)
                .await
                .map_err(|e| self.lost_in(e))?;
        }
        Ok(held.into_iter().map(|(id, _, _)| id).collect())
    }

    /// Which of the ids (a JSON array of simple hex ids) this worker recorded as
    /// succeeded (`Store::succeeded_here`): those whose completion's transaction
    /// committed though its reply was lost (`in_doubt`, by `pg_xact_status`, which
    /// covers the successes that leave no results row), and those the results table
    /// holds as this worker's success.
    pub(crate) async fn succeeded_here(&self, ids: &str) -> Result<Vec<Uuid>> {
        let mut held = self.held().await?;
        let doubted: Vec<(Uuid, i64)> = {
            let in_doubt = self
                .in_doubt
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            in_doubt.iter().map(|(id, xid)| (*id, *xid)).collect()
        };
        let (doubted, xids): (Vec<Uuid>, Vec<i64>) = doubted.into_iter().unzip();
        // A transaction id the server has not reached (a failover to a standby that
        // missed it) is an error for `pg_xact_status`: not committed there. (`CASE`, not
        // `AND`: PostgreSQL may evaluate an `AND`'s sides in either order.)
        let ours: Vec<Uuid> = sqlx::query_scalar(&format!(
            "SELECT task_id FROM {} WHERE task_id IN
                (SELECT value::uuid FROM jsonb_array_elements_text($1::jsonb))
             AND task_status = $2 AND task_last_locked_by = $3
             UNION
             SELECT d.id FROM unnest($4::uuid[], $5::int8[]) AS d(id, xid)
             WHERE d.id IN (SELECT value::uuid FROM jsonb_array_elements_text($1::jsonb))
             AND CASE WHEN d.xid < pg_snapshot_xmax(pg_current_snapshot())::text::int8
                 THEN pg_xact_status(d.xid::text::xid8) END = 'committed'",
            self.schema.table("task_results_t")
        ))
        .bind(ids)
        .bind(crate::model::JobStatus::Processed as i32)
        .bind(&self.worker_id)
        .bind(&doubted)
        .bind(&xids)
        .fetch_all(held.on())
        .await?;
        held.done().await?;
        let asked: Vec<Uuid> = serde_json::from_str::<Vec<Uuid>>(ids).unwrap_or_default();
        self.in_doubt
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|id, _| !asked.contains(id));
        Ok(ours)
    }

    /// `Work::complete`: the batch in one transaction, in id order; the ids whose lease
    /// was held.
    pub(super) async fn complete_batch(
        &self,
        done: &[Success],
        now: DateTime<Utc>,
    ) -> Result<Vec<Uuid>> {
        let mut done: Vec<&Success> = done.iter().collect();
        done.sort_unstable_by_key(|s| s.lease.id);
        let ids: Vec<Uuid> = done.iter().map(|s| s.lease.id).collect();
        let attempts: Vec<i32> = done.iter().map(|s| s.lease.attempt).collect();
        let millis: Vec<i64> = done.iter().map(|s| s.millis).collect();
        let outputs: Vec<Option<&str>> = done.iter().map(|s| s.output.as_deref()).collect();
        let keep: Vec<bool> = done.iter().map(|s| s.keep).collect();
        // The jobs' results rows are updated in their partition when one holds them all
        // (`partitions::Known`); through the partitioned table otherwise, and if that
        // partition is gone (42P01: maintenance retired it since it was read, which it
        // does only when none of its jobs is live, so these rows are not there).
        let mut partition = self.partitions.of(&ids);
        // The plain insert of new results rows first; the upsert if one was there (23505:
        // a row another producer posted with the id of a job on record; `complete_plain`).
        let mut plain = true;
        loop {
            let statement = match &partition {
                Some(name) => self.schema.sql.complete_in(&self.schema, name, plain),
                None => self.schema.sql.completion(plain).clone(),
            };
            let mut conn = self.acquire().await?;
            let mut tx = Self::batched(&mut conn)
                .await
                .map_err(|e| self.lost_in(e))?;
            let held = sqlx::query_as(&statement)
                .bind(&ids)
                .bind(&attempts)
                .bind(&millis)
                .bind(&self.worker_id)
                .bind(now)
                .bind(&outputs)
                .bind(self.schema.done_channel())
                .bind(&keep)
                .fetch_all(self.on(&mut tx))
                .await;
            match held {
                Err(sqlx::Error::Database(e))
                    if partition.is_some() && e.code().as_deref() == Some("42P01") =>
                {
                    partition = None;
                }
                Err(sqlx::Error::Database(e)) if plain && e.code().as_deref() == Some("23505") => {
                    plain = false;
                }
                held => {
                    let held: Vec<Completed> = held.map_err(|e| self.lost(e))?;
                    let xid = held.first().map(|h| h.3);
                    let held = self.settle(&mut tx, &done, settling(&held), now).await?;
                    if let Err(e) = tx.commit().await {
                        // It may have committed: `succeeded_here` asks after a retry.
                        if let Some(xid) = xid {
                            let mut in_doubt = self
                                .in_doubt
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            in_doubt.extend(held.iter().map(|id| (*id, xid)));
                        }
                        return Err(self.lost(e));
                    }
                    let mut in_doubt = self
                        .in_doubt
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if !in_doubt.is_empty() {
                        // Written now, after a try that did not commit.
                        in_doubt.retain(|id, _| !held.contains(id));
                    }
                    return Ok(held);
                }
            }
        }
    }
}
