//! The values the store returns and the client shows: a job's record and status, lists,
//! filters and groups, a worker's own record and statistics. Plain data, below both.

mod list;
mod names;
mod record;
mod stats;

pub use list::{
    CountBy, ErrorGroup, GroupCounts, JobFilter, JobPage, JobSummary, Per, Pruned, QueueState,
    Throughput, WorkerInfo, MAX_PAGE,
};
pub(crate) use names::check_name;
pub(crate) use record::status;
pub use record::{
    Attempt, AttemptOutcome, JobRecord, JobStatus, QueueCounts, QueuedJob, UniqueMode,
};
pub(crate) use stats::{throughput_of, StatBucket, StatRow, WorkerUp};
