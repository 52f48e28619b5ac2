//! PostgreSQL: migrations and every statement sk runs. Every time comparison takes `now`
//! from the caller's clock as a parameter; the database's own `now()` is never used.
//!
//! The module's rooms, the same in each backend: `sql` (the statements of a schema,
//! formatted once), `migrate`, `enqueue`, `admin` and `control` (the driver contract's
//! `Admin` and `Control` on the pool), `work` (`Work`, on the worker's store; its
//! `WorkerRows` is `store::worker_rows::worker_rows_of!`), `dialect`, `flow` (jobs that
//! wait on others), `partitions` (the results table by time); here also `complete` (the
//! worker's completions, and which committed when a reply was lost) and `primary` (a
//! pool that follows the writable host of a replicated cluster).

use chrono::{DateTime, Utc};
use std::time::Duration;

mod admin;
pub(crate) use admin::replay_lag;
mod claims;
mod complete;
mod control;
mod dialect;
mod enqueue;
pub(crate) mod flow;
mod migrate;
pub(crate) mod partitions;
pub(crate) mod pooler;
pub(crate) mod primary;
mod sql;
mod work;

pub(crate) use enqueue::*;
pub(crate) use migrate::*;
pub(crate) use sql::*;
pub(crate) use work::*;

/// Whether `pool`'s connections keep prepared statements (`pooler`).
pub(crate) fn pool_keeps(pool: &PgPool) -> Option<bool> {
    Some(pooler::pool_keeps(pool))
}

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection as _, Executor, PgConnection, PgExecutor, PgPool, Postgres, Row};
use uuid::Uuid;

use super::driver::{Admin, Work};
use super::{
    fair, rates, tenants, ClaimedJob, Failure, Lease, NewJob, ProbeFailure, RatedClaim,
    ScheduleRow, Schema, Success, TableHealth,
};
use crate::error::{Error, Result};
use crate::model::{JobRecord, QueueCounts, QueuedJob};
