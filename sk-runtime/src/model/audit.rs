//! The audit trail: one entry per operator action taken through `Client` (and so `sk`
//! and `sk web`), with who, when, on what and how many jobs ([`Client::audit`](crate::Client::audit)).

use chrono::{DateTime, Utc};

from_row! {
/// An operator's action as the audit trail records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// Its place in the trail: later entries have greater ids.
    pub id: i64 = "audit_id",
    /// When it was taken.
    pub at: DateTime<Utc> = "audit_at_ts",
    /// Who took it: the client's actor ([`Client::actor`](crate::Client::actor)), by
    /// default `os:` and the OS user; `web:` and the dashboard's user for `sk web`.
    pub actor: String = "audit_actor",
    /// What it was: `pause`, `resume`, `retry`, `retry-alone`, `cancel`, `run-now`,
    /// `reschedule`, `reprioritize`, `update`, `delete`, `prune`, `fair`, `unfair`,
    /// `global-limit`, `tenant-limit`, `rate-limit`, `tenant-rate-limit`,
    /// `retry-batch`, `cancel-batch`, `retry-workflow`.
    pub action: String = "audit_action",
    /// What it was taken on: a queue's name (with a limit's new value), a job's, a
    /// batch's or a workflow's id.
    pub target: Option<String> = "audit_target",
    /// The filter it took jobs by (`queue=payments type=charge_card ...`), for an
    /// action on every job a filter takes.
    pub filter: Option<String> = "audit_filter",
    /// How many jobs it changed, for an action on jobs.
    pub jobs: Option<i64> = "audit_jobs",
}
}
