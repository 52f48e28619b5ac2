//! Where sk's tables live (`Schema`), and the checks and conversions of the names and
//! times that address them (identifiers, partition periods, UUIDv7 bounds).

use std::fmt;
use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use uuid::Uuid;

#[cfg(feature = "mysql")]
use super::mysql;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;
use crate::error::{Error, Result};

/// Where sk's tables live: a schema and a name prefix (default `public` and `sk_`, giving
/// `public.sk_tasks_queue_t`). Both must be lowercase SQL identifiers, so they can never
/// carry SQL into a statement. On SQLite and MySQL sk's tables live in the connection's
/// database, named as [`Schema::flat_table`] says.
///
/// ```
/// use sk_runtime::Schema;
///
/// let schema = Schema::new("jobs", "billing_").unwrap();
/// assert_eq!(schema.table("tasks_queue_t"), "jobs.billing_tasks_queue_t");
/// assert!(Schema::new("jobs; DROP TABLE x", "sk_").is_err());
/// ```
#[derive(Clone)]
pub struct Schema {
    schema: String,
    prefix: String,
    #[cfg(feature = "postgres")]
    pub(crate) sql: Arc<postgres::Statements>,
    #[cfg(feature = "sqlite")]
    pub(crate) sqlite: Arc<sqlite::Statements>,
    #[cfg(feature = "mysql")]
    pub(crate) mysql: Arc<mysql::Statements>,
}

static DEFAULT_SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    Schema::new("public", "sk_").expect("the default names are valid identifiers")
});

impl Default for Schema {
    fn default() -> Self {
        DEFAULT_SCHEMA.clone()
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("schema", &self.schema)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Schema {
    /// A schema name and a table-name prefix.
    ///
    /// # Errors
    /// A name is not a lowercase identifier (`[a-z_][a-z0-9_]*`, at most 30 bytes; the
    /// prefix may be empty).
    pub fn new(schema: &str, prefix: &str) -> Result<Self> {
        check_identifier("schema name", schema, false)?;
        check_identifier("table prefix", prefix, true)?;
        #[allow(unused_mut)]
        let mut s = Schema {
            schema: schema.to_owned(),
            prefix: prefix.to_owned(),
            #[cfg(feature = "postgres")]
            sql: Arc::default(),
            #[cfg(feature = "sqlite")]
            sqlite: Arc::default(),
            #[cfg(feature = "mysql")]
            mysql: Arc::default(),
        };
        #[cfg(feature = "postgres")]
        {
            s.sql = Arc::new(postgres::Statements::new(&s));
        }
        #[cfg(feature = "sqlite")]
        {
            s.sqlite = Arc::new(sqlite::Statements::new(&s));
        }
        #[cfg(feature = "mysql")]
        {
            s.mysql = Arc::new(mysql::Statements::new(&s));
        }
        Ok(s)
    }

    /// The qualified name of one of sk's tables, e.g. `table("tasks_queue_t")`.
    pub fn table(&self, name: &str) -> String {
        format!("{}.{}{}", self.schema, self.prefix, name)
    }

    /// A table's name on SQLite and MySQL (no schemas there): the prefix, after the
    /// schema name unless that is `public` (`jobs_sk_tasks_queue_t`).
    pub fn flat_table(&self, name: &str) -> String {
        format!("{}{name}", self.flat_prefix())
    }

    pub(crate) fn flat_prefix(&self) -> String {
        if self.schema == "public" {
            self.prefix.clone()
        } else {
            format!("{}_{}", self.schema, self.prefix)
        }
    }

    /// The LISTEN/NOTIFY channel (the seed's `sk_task_queue_item_added` by default).
    pub fn channel(&self) -> String {
        if self.schema == "public" {
            format!("{}task_queue_item_added", self.prefix)
        } else {
            format!("{}_{}task_queue_item_added", self.schema, self.prefix)
        }
    }

    /// The LISTEN/NOTIFY channel on which workers say jobs finished (`sk_task_done`),
    /// for `Client::wait`.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn done_channel(&self) -> String {
        self.channel().replace("task_queue_item_added", "task_done")
    }

    /// The LISTEN/NOTIFY channel of the job events workers publish
    /// (`WorkerBuilder::publish_events`, `sk_task_events`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn events_channel(&self) -> String {
        self.channel()
            .replace("task_queue_item_added", "task_events")
    }

    /// The LISTEN/NOTIFY channel of control calls to running jobs (`sk_task_control`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn control_channel(&self) -> String {
        self.channel()
            .replace("task_queue_item_added", "task_control")
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn schema_name(&self) -> &str {
        &self.schema
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }
}

pub(crate) fn check_identifier(what: &'static str, name: &str, may_be_empty: bool) -> Result<()> {
    let mut chars = name.chars();
    let valid_start = match chars.next() {
        None => may_be_empty,
        Some(c) => c.is_ascii_lowercase() || c == '_',
    };
    if !valid_start
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        || name.len() > 30
    {
        return Err(Error::invalid(
            what,
            format!("{name:?} must be a lowercase identifier ([a-z_][a-z0-9_]*, at most 30 bytes)"),
        ));
    }
    Ok(())
}

/// The span of a results partition unless `WorkerBuilder::results_partition` says
/// otherwise: a day.
pub(crate) const RESULTS_PARTITION: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How the results partitions are cut: each covers `period` of posting time, counted in
/// whole periods from `origin_ms` (a midnight, UTC), so weekly partitions start on the day
/// of the week the origin is (seed 002's weeks start on Monday) and daily ones at midnight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartitionSpan {
    /// The span, in ms (at least 1).
    pub(crate) period: i64,
    /// A time spans are counted from, in ms since the epoch.
    pub(crate) origin_ms: i64,
}

impl PartitionSpan {
    /// Spans of `period`, weeks starting on `week_start`.
    pub(crate) fn new(period: std::time::Duration, week_start: chrono::Weekday) -> Self {
        // 1970-01-01 was a Thursday: the first `week_start` on or after it.
        let days = i64::from((week_start.num_days_from_monday() + 4) % 7);
        PartitionSpan {
            period: i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1),
            origin_ms: days * 86_400_000,
        }
    }

    /// The start of the span holding `at_ms`.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn start_of(&self, at_ms: i64) -> i64 {
        self.origin_ms + (at_ms - self.origin_ms).div_euclid(self.period) * self.period
    }

    /// The end of the span holding `at_ms` (the start of the next).
    #[cfg(feature = "mysql")]
    pub(crate) fn end_of(&self, at_ms: i64) -> i64 {
        self.start_of(at_ms).saturating_add(self.period)
    }
}

/// Checks a partition period: whole minutes, from an hour to a year.
pub(crate) fn check_period(period: std::time::Duration) -> Result<()> {
    if period < std::time::Duration::from_secs(3600)
        || period > std::time::Duration::from_secs(366 * 24 * 3600)
        || period.as_secs() % 60 != 0
        || period.subsec_nanos() != 0
    {
        return Err(Error::invalid(
            "results partition period",
            format!(
                "{} must be whole minutes, from 1 hour to 366 days",
                humantime::format_duration(period)
            ),
        ));
    }
    Ok(())
}

/// The smallest UUIDv7 of a millisecond: every id posted earlier sorts below it. The
/// results partitions' bounds are such ids, so a partition holds the jobs posted in its
/// span.
pub(crate) fn id_floor(at: DateTime<Utc>) -> Uuid {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let mut bytes = [0; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    Uuid::from_bytes(bytes)
}

/// The millisecond of a UUIDv7 (of a partition bound).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn millis_of(id: Uuid) -> i64 {
    let mut bytes = [0; 8];
    bytes[2..].copy_from_slice(&id.as_bytes()[..6]);
    i64::from_be_bytes(bytes)
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn time_of(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
