//! The worker side of the driver contract (`Work`, and `WorkerRows`' pruning) opened to
//! its conformance suite (`tests/store/`), which runs every operation on every backend.
//! Not a public API: the store stays sealed; this is `sk_runtime::__driver`, hidden from
//! the docs.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Claim, Failure, Lease, Pool, Schema, Store, Success};
use crate::error::Result;
use crate::model::JobStatus;

/// A worker's store on a pool and the default schema, under a worker id.
pub struct Driver {
    store: Store,
}

/// A job a claim leased: its id, the attempt this lease is, and what the row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The job's id.
    pub id: Uuid,
    /// The attempt the lease is (the fencing token, with the id and the worker).
    pub attempt: i32,
    /// The job's task type.
    pub task_type: String,
    /// The job's priority.
    pub priority: i32,
    /// The job's queue.
    pub queue: String,
}

impl Driver {
    /// A worker store on `pool` (the default schema), fencing its writes with `worker`.
    pub fn new(pool: impl Into<Pool>, worker: &str) -> Self {
        Driver {
            store: pool.into().store(
                Schema::default(),
                worker.to_owned(),
                super::bound::Bounds::default(),
            ),
        }
    }

    /// `Work::claim`: leases up to `limit` due jobs of `task_types` (every queue, none
    /// paused) until `lease_until`.
    ///
    /// # Errors
    /// The database fails.
    pub async fn claim(
        &self,
        task_types: &[&str],
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<Claimed>> {
        self.claim_from(task_types, &[], limit, now, lease_until)
            .await
    }

    /// `claim`, skipping the `paused` queues.
    ///
    /// # Errors
    /// The database fails.
    pub async fn claim_from(
        &self,
        task_types: &[&str],
        paused: &[&str],
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<Claimed>> {
        let task_types: Vec<String> = task_types.iter().map(|t| (*t).to_owned()).collect();
        let paused: Vec<String> = paused.iter().map(|q| (*q).to_owned()).collect();
        let claim = Claim {
            task_types: &task_types,
            queues: None,
            tenants: None,
            paused: &paused,
            capped: false,
            fair: None,
            tenant_capped: false,
            untenanted: false,
            limit,
            now,
            lease_until,
        };
        Ok(self
            .store
            .claim(&claim)
            .await?
            .into_iter()
            .map(|job| Claimed {
                id: job.task_id,
                attempt: job.task_attempt,
                task_type: job.task_type,
                priority: job.task_priority,
                queue: job.task_queue,
            })
            .collect())
    }

    /// `Work::complete`: records successes of these leases; the ids still held.
    ///
    /// # Errors
    /// The database fails.
    pub async fn complete(&self, leases: &[(Uuid, i32)], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let done: Vec<Success> = leases
            .iter()
            .map(|&(id, attempt)| Success {
                lease: Lease { id, attempt },
                millis: 1,
                output: None,
                keep: true,
            })
            .collect();
        self.store.complete(&done, now).await
    }

    /// `Work::fail`: records failures of these leases with `message`, retried at
    /// `retry_at` (status error) or final (`None`: fatal); per lease, whether it was held.
    ///
    /// # Errors
    /// The database fails.
    pub async fn fail(
        &self,
        leases: &[(Uuid, i32)],
        retry_at: Option<DateTime<Utc>>,
        message: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<bool>> {
        let failures: Vec<Failure> = leases
            .iter()
            .map(|&(id, attempt)| Failure {
                lease: Lease { id, attempt },
                millis: 1,
                status: if retry_at.is_some() {
                    JobStatus::Error
                } else {
                    JobStatus::Fatal
                },
                retry_at,
                kind: "conformance".to_owned(),
                message: message.to_owned(),
                detail: None,
                recoverable: retry_at.is_some(),
            })
            .collect();
        self.store.fail(&failures, now).await
    }

    /// `Work::give_back`: hands these leases back, due at `at`, without using an attempt;
    /// how many were held.
    ///
    /// # Errors
    /// The database fails.
    pub async fn give_back(&self, leases: &[(Uuid, i32)], at: DateTime<Utc>) -> Result<u64> {
        self.store.give_back(&leases_of(leases), at).await
    }

    /// The read-back of a completion retried after its reply was lost: which of `ids`
    /// this worker recorded as succeeded.
    ///
    /// # Errors
    /// The database fails.
    pub async fn succeeded_here(&self, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        self.store.succeeded_here(ids).await
    }

    /// `WorkerRows::prune_tenant_logs`: deletes the logs of starts per tenant last
    /// written before `before` that hold no tenant shut at `now`; how many.
    ///
    /// # Errors
    /// The database fails.
    pub async fn prune_tenant_logs(
        &self,
        before: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<u64> {
        self.store.prune_tenant_logs(before, now).await
    }

    /// `Work::extend`: extends these leases to `until`; the ids still held.
    ///
    /// # Errors
    /// The database fails.
    pub async fn extend(&self, leases: &[(Uuid, i32)], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        self.store.extend(&leases_of(leases), until).await
    }
}

fn leases_of(leases: &[(Uuid, i32)]) -> Vec<Lease> {
    leases
        .iter()
        .map(|&(id, attempt)| Lease { id, attempt })
        .collect()
}
