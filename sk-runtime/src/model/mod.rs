//! The values the store returns and the client shows: a job's record and status, lists,
//! filters and groups, a worker's own record and statistics. Plain data, below both.

/// A struct the store reads from a row by column name: the struct as written, each field
/// followed by how it is read, and `sqlx::FromRow` for each backend compiled in. A field
/// reads `= "its_column"`, `= [json "its_column"]` (JSON text decoded with serde),
/// `= [default "its_column"]` (its `Default` when the row has no such column) or
/// `= [skip]` (its `Default`, not read). What `#[derive(sqlx::FromRow)]`
/// gave, without sqlx's `derive` feature, whose proc macro built sqlx and each backend's
/// driver a second time for the compiler's host.
macro_rules! from_row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field_vis:vis $field:ident: $ty:ty = $how:tt
            ),* $(,)?
        }
        $(=> $settle:path)?
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $(
                $(#[$field_meta])*
                $field_vis $field: $ty,
            )*
        }

        #[cfg(feature = "postgres")]
        impl sqlx::FromRow<'_, sqlx::postgres::PgRow> for $name {
            fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
                let read = Self { $($field: $crate::model::from_row!(@read row, $how),)* };
                Ok($crate::model::from_row!(@settle read $(, $settle)?))
            }
        }

        #[cfg(feature = "sqlite")]
        impl sqlx::FromRow<'_, sqlx::sqlite::SqliteRow> for $name {
            fn from_row(row: &sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
                let read = Self { $($field: $crate::model::from_row!(@read row, $how),)* };
                Ok($crate::model::from_row!(@settle read $(, $settle)?))
            }
        }

        #[cfg(feature = "mysql")]
        impl sqlx::FromRow<'_, sqlx::mysql::MySqlRow> for $name {
            fn from_row(row: &sqlx::mysql::MySqlRow) -> Result<Self, sqlx::Error> {
                let read = Self { $($field: $crate::model::from_row!(@read row, $how),)* };
                Ok($crate::model::from_row!(@settle read $(, $settle)?))
            }
        }
    };
    (@read $row:ident, $column:literal) => {
        sqlx::Row::try_get($row, $column)?
    };
    (@read $row:ident, [json $column:literal]) => {
        sqlx::Row::try_get::<sqlx::types::Json<_>, _>($row, $column)?.0
    };
    (@read $row:ident, [default $column:literal]) => {
        match sqlx::Row::try_get($row, $column) {
            Err(sqlx::Error::ColumnNotFound(_)) => Default::default(),
            read => read?,
        }
    };
    (@read $row:ident, [skip]) => {
        Default::default()
    };
    // `=> path` after the struct: a fn that completes the value read.
    (@settle $read:ident) => {
        $read
    };
    (@settle $read:ident, $settle:path) => {
        $settle($read)
    };
}
pub(crate) use from_row;

mod audit;
mod batch;
mod errors;
mod limits;
mod list;
mod names;
mod record;
mod seed_002;
mod stats;
mod workflow;

pub use audit::AuditEntry;
pub use batch::{BatchCallback, BatchEvent, BatchRecord};
pub use errors::ErrorGroup;
pub(crate) use errors::{groups_of, like_of, mask, ErrorRow};
pub use limits::{RateLimit, RateState, TenantHold, TenantState, MAX_RATE_WINDOW};
pub(crate) use limits::{StartLog, START_ALLOWANCE};
pub use list::{
    CountBy, GroupCounts, JobFilter, JobPage, JobSummary, Per, Pruned, QueueState, Throughput,
    WorkerInfo, MAX_PAGE,
};
pub(crate) use names::check_name;
pub(crate) use record::status;
pub use record::{
    Attempt, AttemptOutcome, JobRecord, JobStatus, QueueCounts, QueuedJob, UniqueMode,
};
pub(crate) use seed_002::check as check_seed_002;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use seed_002::seed_002_key;
pub use seed_002::UpdateOutcome;
pub(crate) use seed_002::{SEED_002_ID_CHARS, SUB_STATE_CHARS};
pub(crate) use stats::{throughput_of, StatBucket, StatRow, WorkerUp};
pub(crate) use workflow::WorkflowJobRow;
pub use workflow::{WorkflowJob, WorkflowRecord};
