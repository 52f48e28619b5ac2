//! Schedules kept in the database (seed 003's periodic tasks): the API to add, list and
//! remove them, and the worker's read of them.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::worker::Shared;

use super::cron::parse;
use super::Entry;

/// Replaces the stored entries (after the first `fixed`) with the schedules the table
/// holds for task types this worker runs. An unchanged schedule keeps its last tick; a
/// new or changed one counts ticks from its update (or the worker's start, if later). A
/// row whose expression does not parse (written by hand: [`StoredSchedules::add`] checks)
/// is skipped with one warning.
pub(super) async fn load_stored(
    shared: &Shared,
    entries: &mut Vec<(Entry, DateTime<Utc>)>,
    fixed: usize,
    start: DateTime<Utc>,
    refused: &mut std::collections::HashSet<(String, DateTime<Utc>)>,
) {
    let rows = match shared.store.stored_schedules().await {
        Ok(rows) => rows,
        Err(e) => {
            let e = shared.store.explained(e).await;
            crate::store::bound::warn_unless_moved!(
                &e,
                "sk: cannot read the stored schedules: {e}"
            );
            return;
        }
    };
    let mut stored = Vec::new();
    for row in rows {
        let Some(registration) = shared.registry.jobs.get(row.task_type.as_str()) else {
            continue;
        };
        let version = (row.schedule_name, row.schedule_updated_at_ts);
        if let Some(known) = entries[fixed..]
            .iter()
            .find(|(e, _)| e.stored.as_ref() == Some(&version))
        {
            stored.push(known.clone());
            continue;
        }
        let schedule = match parse(&row.schedule_cron) {
            Ok(schedule) => schedule,
            Err(reason) => {
                if refused.insert(version.clone()) {
                    tracing::warn!(
                        schedule = version.0,
                        "sk: stored schedule skipped: {reason}"
                    );
                }
                continue;
            }
        };
        let entry = Entry {
            task_type: registration.task_type,
            payload: row.task_payload,
            options: registration.options,
            schedule,
            key_prefix: format!("sk-schedule:{}", version.0),
            overlap: row.schedule_overlap,
            run_missed: false,
            stored: Some(version),
        };
        stored.push((entry, row.schedule_updated_at_ts.max(start)));
    }
    entries.truncate(fixed);
    entries.extend(stored);
}

/// Schedules kept in the database (seed 003's periodic tasks, added and removed while
/// workers run): every worker that runs the job's type reads them once per poll interval
/// and enqueues each tick once across workers, as it does for `#[job(schedule)]`. A
/// tick that comes while the last one is still live is skipped unless the schedule
/// allows overlap.
///
/// ```no_run
/// # use sk_runtime::{job, StoredSchedules};
/// #[job]
/// async fn send_digest(kind: String) {}
///
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// let schedules = StoredSchedules::new(pool);
/// schedules
///     .add("weekly-digest", "CRON_TZ=Europe/Paris 0 8 * * MON", SendDigest::new("weekly".into()))
///     .await?;
/// assert_eq!(schedules.list().await?.len(), 1);
/// schedules.remove("weekly-digest").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct StoredSchedules {
    pool: crate::Pool,
    schema: crate::Schema,
    clock: Arc<dyn crate::Clock>,
}

/// One schedule of [`StoredSchedules::list`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredSchedule {
    /// Its name, unique.
    pub name: String,
    /// The job's `task_type`.
    pub task_type: String,
    /// The job's arguments as JSON.
    pub payload: serde_json::Value,
    /// The cron expression, with its `CRON_TZ=` prefix if any.
    pub cron: String,
    /// Whether a tick may start while the last one is still live.
    pub overlap: bool,
    /// When it was added or last changed; ticks after this run.
    pub updated_at: DateTime<Utc>,
}

impl StoredSchedules {
    /// The schedules of the default schema.
    pub fn new(pool: impl Into<crate::Pool>) -> Self {
        StoredSchedules {
            pool: pool.into(),
            schema: crate::Schema::default(),
            clock: Arc::new(crate::SystemClock),
        }
    }

    /// Another schema/prefix.
    #[must_use]
    pub fn schema(mut self, schema: crate::Schema) -> Self {
        self.schema = schema;
        self
    }

    /// Stamps changes with `clock` (the workers' clock, in tests).
    #[must_use]
    pub fn clock(mut self, clock: impl crate::Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Adds the schedule `name`, or replaces the one of that name: `job` at every tick of
    /// `cron` (5 fields, or 6/7 with seconds first; UTC unless it starts with
    /// `CRON_TZ=<IANA zone> `), from now on. Ticks do not overlap a still-live tick.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty or too long name or an expression that does not
    /// parse (nothing is stored); the database fails.
    pub async fn add<J: crate::Job>(&self, name: &str, cron: &str, job: J) -> Result<()> {
        self.put(name, cron, job, false).await
    }

    /// As [`add`](Self::add), but a tick starts even while the last one is still live.
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub async fn add_overlapping<J: crate::Job>(
        &self,
        name: &str,
        cron: &str,
        job: J,
    ) -> Result<()> {
        self.put(name, cron, job, true).await
    }

    async fn put<J: crate::Job>(
        &self,
        name: &str,
        cron: &str,
        job: J,
        overlap: bool,
    ) -> Result<()> {
        crate::model::check_name("schedule name", name)?;
        parse(cron).map_err(|reason| Error::invalid("cron schedule", reason))?;
        let payload = serde_json::to_string(&job).map_err(|source| Error::Serialize {
            task_type: J::TASK_TYPE,
            source,
        })?;
        let row = crate::store::ScheduleRow {
            schedule_name: name.to_owned(),
            task_type: J::TASK_TYPE.to_owned(),
            task_payload: payload,
            schedule_cron: cron.trim().to_owned(),
            schedule_overlap: overlap,
            // Microseconds, as the table keeps them: workers compare it to their copy.
            schedule_updated_at_ts: chrono::SubsecRound::trunc_subsecs(self.clock.now(), 6),
        };
        self.pool.schedule_put(&self.schema, &row).await
    }

    /// Removes the schedule `name`; false if there was none. No tick of it is enqueued
    /// after this returns (ticks already enqueued still run).
    ///
    /// # Errors
    /// The database fails.
    pub async fn remove(&self, name: &str) -> Result<bool> {
        self.pool.schedule_remove(&self.schema, name).await
    }

    /// Every stored schedule, by name.
    ///
    /// # Errors
    /// The database fails.
    pub async fn list(&self) -> Result<Vec<StoredSchedule>> {
        let rows = self.pool.schedule_list(&self.schema).await?;
        Ok(rows
            .into_iter()
            .map(|row| StoredSchedule {
                payload: serde_json::from_str(&row.task_payload)
                    .unwrap_or(serde_json::Value::String(row.task_payload)),
                name: row.schedule_name,
                task_type: row.task_type,
                cron: row.schedule_cron,
                overlap: row.schedule_overlap,
                updated_at: row.schedule_updated_at_ts,
            })
            .collect())
    }
}
