//! The audit trail: one entry per operator action taken through `Client` (and so `sk`
//! and `sk web`), with who, when, on what and how many jobs ([`Client::audit`](crate::Client::audit)).

use chrono::{DateTime, Utc};

/// An operator's action as the audit trail records it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// Its place in the trail: later entries have greater ids.
    #[sqlx(rename = "audit_id")]
    pub id: i64,
    /// When it was taken.
    #[sqlx(rename = "audit_at_ts")]
    pub at: DateTime<Utc>,
    /// Who took it: the client's actor ([`Client::actor`](crate::Client::actor)), by
    /// default `os:` and the OS user; `web:` and the dashboard's user for `sk web`.
    #[sqlx(rename = "audit_actor")]
    pub actor: String,
    /// What it was: `pause`, `resume`, `retry`, `retry-alone`, `cancel`, `run-now`,
    /// `reschedule`, `reprioritize`, `update`, `delete`, `prune`, `fair`, `unfair`,
    /// `global-limit`, `tenant-limit`, `rate-limit`, `tenant-rate-limit`,
    /// `retry-batch`, `cancel-batch`, `retry-workflow`.
    #[sqlx(rename = "audit_action")]
    pub action: String,
    /// What it was taken on: a queue's name (with a limit's new value), a job's, a
    /// batch's or a workflow's id.
    #[sqlx(rename = "audit_target")]
    pub target: Option<String>,
    /// The filter it took jobs by (`queue=payments type=charge_card ...`), for an
    /// action on every job a filter takes.
    #[sqlx(rename = "audit_filter")]
    pub filter: Option<String>,
    /// How many jobs it changed, for an action on jobs.
    #[sqlx(rename = "audit_jobs")]
    pub jobs: Option<i64>,
}
