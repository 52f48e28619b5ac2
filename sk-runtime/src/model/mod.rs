//! The values the store returns and the client shows: a job's record and status, lists,
//! filters and groups, a worker's own record and statistics. Plain data, below both.

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
pub(crate) use limits::StartLog;
pub use limits::{RateLimit, RateState, TenantHold, TenantState, MAX_RATE_WINDOW};
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
