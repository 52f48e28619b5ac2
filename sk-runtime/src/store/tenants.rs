//! Limits per tenant of a queue, written once over the [`Dialect`]: at most so many
//! running jobs of each tenant (`queue_tenant_limit`, PostgreSQL migration 20) and at
//! most so many starts of each tenant per window (the limit in `rate_limits_t`, scope
//! `tenant`; each tenant's log of starts in `tenant_starts_t`, migration 21). A claim of
//! such a queue reads them under the queue's locks, serves each tenant up to its room
//! (`fair::claim_within`) and records the starts before it commits.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Boxed, Dialect};
use super::rates::{self, TENANT};
use super::{Claim, Schema};
use crate::error::Result;
use crate::model::{RateLimit, RateState, StartLog, TenantHold, TenantState};

/// A tenant's log of starts and the end of its hold, as a claim read them.
pub(crate) type Log = (StartLog, Option<DateTime<Utc>>);

/// A queue's limits per tenant as a claim of the queue read them under its locks, and
/// what each tenant has used of them.
pub(crate) struct TenantRoom {
    /// At most this many running jobs of each tenant.
    pub(crate) running_limit: Option<i64>,
    /// Each tenant's running jobs (of those with any).
    pub(crate) running: HashMap<String, i64>,
    /// At most so many starts of each tenant per window.
    pub(crate) rate: Option<RateLimit>,
    /// The logs of the tenants the claim read ([`logs`]); a tenant without one has
    /// started nothing in the window.
    pub(crate) logs: HashMap<String, Log>,
    pub(crate) now: DateTime<Utc>,
}

impl TenantRoom {
    /// How many more jobs of `tenant` may start now.
    pub(crate) fn of(&self, tenant: &str) -> i64 {
        let running = self.running_limit.map_or(i64::MAX, |limit| {
            (limit - self.running.get(tenant).copied().unwrap_or(0)).max(0)
        });
        let started = match (&self.rate, self.logs.get(tenant)) {
            (Some(limit), Some((log, held))) => i64::from(log.room(limit, *held, self.now)),
            (Some(limit), None) => i64::from(limit.count),
            (None, _) => i64::MAX,
        };
        running.min(started)
    }

    /// When the first of `tenants` (passed over at their limits) may start a job again,
    /// if each was held by its rate; `None` if one was held by its running jobs (which
    /// may end at any time) or there is none.
    pub(crate) fn opens_at<'a>(
        &self,
        tenants: impl Iterator<Item = &'a String>,
    ) -> Option<DateTime<Utc>> {
        let limit = self.rate.as_ref()?;
        let mut first: Option<DateTime<Utc>> = None;
        for tenant in tenants {
            let (log, held) = self.logs.get(tenant)?;
            let at = log.opens_at(limit, *held, self.now)?;
            first = Some(first.map_or(at, |f| f.min(at)));
        }
        first
    }

    /// The logs of the tenants that started jobs (`started`: each job's tenant), with
    /// those starts recorded: (tenant, log), to write before the claim commits.
    pub(crate) fn record<'a>(
        &mut self,
        started: impl Iterator<Item = &'a str>,
    ) -> Vec<(String, String)> {
        let Some(limit) = self.rate else {
            return Vec::new();
        };
        let mut counts: Vec<(&str, u32)> = Vec::new();
        for tenant in started {
            match counts.iter_mut().find(|(t, _)| *t == tenant) {
                Some((_, n)) => *n += 1,
                None => counts.push((tenant, 1)),
            }
        }
        counts
            .into_iter()
            .map(|(tenant, n)| {
                let (log, _) = self.logs.entry(tenant.to_owned()).or_default();
                log.record(&limit, self.now, n);
                (tenant.to_owned(), log.text())
            })
            .collect()
    }
}

/// The one queue of a claim with a limit per tenant (`claim.tenant_capped`).
///
/// # Errors
/// Such a claim of no queue or several, or without a turn (a bug in the producer).
pub(crate) fn tenant_capped_queue<'a>(claim: &Claim<'a>) -> Result<Option<&'a str>> {
    match (claim.tenant_capped, claim.queues, claim.fair) {
        (false, _, _) => Ok(None),
        (true, Some([queue]), Some(_)) => Ok(Some(queue)),
        (true, _, _) => Err(crate::Error::invalid(
            "claim",
            "a claim under a limit per tenant names exactly one queue and its turn",
        )),
    }
}

/// The limits per tenant of `queue` (`None`: it has none, lifted since the worker read
/// its controls) and each tenant's running jobs at `now`, with the queue's rows locked
/// until the transaction on `conn` ends (its row in the queues table, then its rate
/// limit's; SQLite's write transaction serializes them anyway), so claims of the queue
/// take turns, each counting after the one before committed. The running jobs are read
/// from the leased jobs only ([`Dialect::running_by_tenant`]).
pub(crate) fn room<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    queue: &'a str,
    now: DateTime<Utc>,
) -> Boxed<'a, Option<TenantRoom>>
where
    (Option<i64>,): for<'r> sqlx::FromRow<'r, D::Row>,
    (i64, i64): for<'r> sqlx::FromRow<'r, D::Row>,
    (String, i64): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let (running_limit, rate) = limits::<D>(&mut *conn, schema, queue, D::for_update()).await?;
        if running_limit.is_none() && rate.is_none() {
            return Ok(None);
        }
        let mut running = HashMap::new();
        if running_limit.is_some() {
            let count = D::running_by_tenant(schema);
            let args = [Arg::Text(Some(queue)), Arg::Time(now)];
            let rows: Vec<(String, i64)> = D::fetch_all_on(conn, &count, &args).await?;
            running = rows.into_iter().collect();
        }
        Ok(Some(TenantRoom {
            running_limit,
            running,
            rate,
            logs: HashMap::new(),
            now,
        }))
    })
}

/// The logs of starts of `tenants` of `queue` that have one, as of `now` under `limit`.
pub(crate) fn logs<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    queue: &'a str,
    tenants: &'a [String],
    limit: RateLimit,
    now: DateTime<Utc>,
) -> Boxed<'a, HashMap<String, Log>>
where
    (String, String, Option<DateTime<Utc>>): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        if tenants.is_empty() {
            return Ok(HashMap::new());
        }
        let list: Vec<String> = (2..tenants.len() + 2).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT {}, starts_log, starts_held_until_ts FROM {}
             WHERE starts_queue = $1 AND starts_tenant IN ({})",
            D::text("starts_tenant"),
            D::table(schema, "tenant_starts_t"),
            list.join(", ")
        );
        let args: Vec<Arg<'_>> = std::iter::once(Arg::Text(Some(queue)))
            .chain(tenants.iter().map(|t| Arg::Text(Some(t))))
            .collect();
        let rows: Vec<(String, String, Option<DateTime<Utc>>)> =
            D::fetch_all_on(conn, &sql, &args).await?;
        Ok(rows
            .into_iter()
            .map(|(tenant, log, held)| (tenant, (StartLog::parse(&log, &limit, now), held)))
            .collect())
    })
}

/// The limits per tenant of `queue`: of running jobs (`queue_tenant_limit`) and of
/// starts per window, each row read with `lock` (`FOR UPDATE`, or nothing).
fn limits<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    queue: &'a str,
    lock: &'static str,
) -> Boxed<'a, (Option<i64>, Option<RateLimit>)>
where
    (Option<i64>,): for<'r> sqlx::FromRow<'r, D::Row>,
    (i64, i64): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let running_sql = format!(
            "SELECT {} FROM {} WHERE queue_name = $1{lock}",
            D::bigint("queue_tenant_limit"),
            D::table(schema, "queues_t"),
        );
        let rows: Vec<(Option<i64>,)> =
            D::fetch_all_on(&mut *conn, &running_sql, &[Arg::Text(Some(queue))]).await?;
        let rate_sql = format!(
            "SELECT {}, limit_window_ms FROM {} WHERE limit_scope = $1 AND limit_name = $2{lock}",
            D::bigint("limit_count"),
            D::table(schema, "rate_limits_t"),
        );
        let args = [Arg::Text(Some(TENANT)), Arg::Text(Some(queue))];
        let rates: Vec<(i64, i64)> = D::fetch_all_on(conn, &rate_sql, &args).await?;
        let rate = rates
            .first()
            .map(|(count, window_ms)| rates::limit_of(queue, *count, *window_ms));
        Ok((rows.first().and_then(|r| r.0), rate))
    })
}

/// The tenants of `queue` with live jobs, or with starts or a hold in the window of its
/// rate limit per tenant, by name, each with what its limits leave it at `now`
/// (`Client::tenants`). Read without locks: a claim may change them at once.
pub(crate) fn states<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    queue: &'a str,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<TenantState>>
where
    (Option<i64>,): for<'r> sqlx::FromRow<'r, D::Row>,
    (i64, i64): for<'r> sqlx::FromRow<'r, D::Row>,
    (String, i64, i64): for<'r> sqlx::FromRow<'r, D::Row>,
    (String, String, Option<DateTime<Utc>>): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        // One transaction (read-only) for its statements: behind a transaction pooler a
        // statement's parse and execution outside one may reach two servers.
        let mut held = super::bound::Guarded::new(pool.acquire().await?);
        let mut conn = sqlx::Connection::begin(&mut *held).await?;
        let (running_limit, rate) = limits::<D>(&mut conn, schema, queue, "").await?;
        let live_sql = format!(
            "SELECT {}, {}, {} FROM {} WHERE task_queue = $1 AND task_tenant IS NOT NULL
             GROUP BY task_tenant",
            D::text("task_tenant"),
            D::count_if("task_locked_by IS NULL AND task_locked_until_ts <= $2"),
            D::count_if("task_locked_by IS NOT NULL AND task_locked_until_ts > $2"),
            D::table(schema, "tasks_queue_t")
        );
        let args = [Arg::Text(Some(queue)), Arg::Time(now)];
        let live: Vec<(String, i64, i64)> = D::fetch_all_on(&mut conn, &live_sql, &args).await?;
        let mut states: std::collections::BTreeMap<String, TenantState> = live
            .into_iter()
            .map(|(tenant, available, running)| (tenant.clone(), fresh(tenant, available, running)))
            .collect();
        if let Some(limit) = rate {
            let logs_sql = format!(
                "SELECT {}, starts_log, starts_held_until_ts FROM {} WHERE starts_queue = $1",
                D::text("starts_tenant"),
                D::table(schema, "tenant_starts_t"),
            );
            let logs: Vec<(String, String, Option<DateTime<Utc>>)> =
                D::fetch_all_on(&mut conn, &logs_sql, &[Arg::Text(Some(queue))]).await?;
            let mut logged = HashMap::new();
            for (tenant, log, held) in logs {
                let state = StartLog::parse(&log, &limit, now).state(limit, held, now);
                if state.started > 0 || state.opens_at.is_some() {
                    logged.insert(tenant, state);
                }
            }
            for tenant in logged.keys() {
                states
                    .entry(tenant.clone())
                    .or_insert_with(|| fresh(tenant.clone(), 0, 0));
            }
            for state in states.values_mut() {
                state.rate = Some(logged.remove(&state.tenant).unwrap_or(RateState {
                    limit,
                    started: 0,
                    opens_at: None,
                }));
            }
        }
        for state in states.values_mut() {
            state.held_by = if running_limit.is_some_and(|n| state.running >= n) {
                Some(TenantHold::RunningLimit)
            } else if state.rate.as_ref().is_some_and(|r| r.opens_at.is_some()) {
                Some(TenantHold::RateLimit)
            } else {
                None
            };
        }
        conn.commit().await?;
        Ok(states.into_values().collect())
    })
}

/// A tenant's state before its limits are read.
fn fresh(tenant: String, available: i64, running: i64) -> TenantState {
    TenantState {
        tenant,
        available,
        running,
        rate: None,
        held_by: None,
    }
}

/// Writes the logs of starts `logs` (tenant, log) of `queue`, in the claim's transaction.
pub(crate) fn record<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    queue: &'a str,
    logs: &'a [(String, String)],
    now: DateTime<Utc>,
) -> Boxed<'a, ()> {
    Box::pin(async move {
        let sql = format!(
            "INSERT INTO {} (starts_queue, starts_tenant, starts_log, starts_updated_at_ts)
             VALUES ($1, $2, $3, $4) {}",
            D::table(schema, "tenant_starts_t"),
            D::upsert(
                "starts_queue, starts_tenant",
                &["starts_log", "starts_updated_at_ts"]
            )
        );
        for (tenant, log) in logs {
            let args = [
                Arg::Text(Some(queue)),
                Arg::Text(Some(tenant)),
                Arg::Text(Some(log)),
                Arg::Time(now),
            ];
            D::execute_on(&mut *conn, &sql, &args).await?;
        }
        Ok(())
    })
}

/// Holds `tenant`'s starts in `queue` shut until `until` (a later hold it has stays), if
/// the queue has a rate limit per tenant; whether it has one.
pub(crate) fn hold<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    queue: &'a str,
    tenant: &'a str,
    until: DateTime<Utc>,
) -> Boxed<'a, bool>
where
    (i64,): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let t = D::table(schema, "tenant_starts_t");
        let limited = format!(
            "SELECT {} FROM {} WHERE limit_scope = $1 AND limit_name = $2",
            D::bigint("limit_count"),
            D::table(schema, "rate_limits_t")
        );
        let args = [Arg::Text(Some(TENANT)), Arg::Text(Some(queue))];
        let limit: Vec<(i64,)> = D::fetch_all(pool, &limited, &args).await?;
        if limit.is_empty() {
            return Ok(false);
        }
        let args = [
            Arg::Text(Some(queue)),
            Arg::Text(Some(tenant)),
            Arg::Time(until),
        ];
        let update = format!(
            "UPDATE {t} SET starts_held_until_ts = CASE
                WHEN starts_held_until_ts IS NULL OR starts_held_until_ts < $3 THEN $3
                ELSE starts_held_until_ts END
             WHERE starts_queue = $1 AND starts_tenant = $2"
        );
        if D::execute(pool, &update, &args).await? == 0 {
            let insert = D::insert_or_ignore(
                &t,
                "starts_queue, starts_tenant, starts_log, starts_held_until_ts, starts_updated_at_ts",
                "$1, $2, '[]', $3, $3",
            );
            // A claim may have written the tenant's first log since: hold that one.
            if D::execute(pool, &insert, &args).await? == 0 {
                D::execute(pool, &update, &args).await?;
            }
        }
        Ok(true)
    })
}
