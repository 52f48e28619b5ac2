//! Rate limits in the database, written once over the [`Dialect`]: setting one, reading
//! them for insight and for a worker's controls, and a claim's take and spend of a limit
//! under its row's lock (the table `rate_limits_t`; the log's rules are
//! `model::limits`).

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Boxed, Dialect};
use super::Schema;
use crate::error::Result;
use crate::model::{RateLimit, RateState, StartLog};

/// The scope of a queue's limit (`limit_scope`).
pub(crate) const QUEUE: &str = "queue";
/// The scope of a job type's limit (`#[job(rate = "...")]`).
pub(crate) const TYPE: &str = "type";
/// The scope of a queue's rate limit per tenant.
pub(crate) const TENANT: &str = "tenant";

/// A limit's row: name, count, window in ms, log of starts, hold.
type Row = (String, i64, i64, String, Option<DateTime<Utc>>);

fn select<D: Dialect>(schema: &Schema, by_name: bool) -> String {
    format!(
        "SELECT {}, {}, limit_window_ms, {}, limit_held_until_ts FROM {} WHERE limit_scope = $1{}",
        D::text("limit_name"),
        D::bigint("limit_count"),
        D::text("limit_starts"),
        D::table(schema, "rate_limits_t"),
        if by_name { " AND limit_name = $2" } else { "" }
    )
}

/// The limit a row holds (a row that breaks the table's checks reads as 1 start a
/// millisecond, and is named in the log).
pub(crate) fn limit_of(name: &str, count: i64, window_ms: i64) -> RateLimit {
    let count = u32::try_from(count).unwrap_or(0);
    let window = std::time::Duration::from_millis(u64::try_from(window_ms).unwrap_or(0));
    RateLimit::new(count, window).unwrap_or_else(|e| {
        tracing::warn!("sk: the rate limit of {name} cannot be read ({e})");
        RateLimit {
            count: 1,
            window: std::time::Duration::from_millis(1),
        }
    })
}

/// Sets or (with `None`) lifts the limit of `name` in `scope`. A changed limit keeps the
/// log of starts, so the starts before the change still count.
pub(crate) async fn set<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    scope: &str,
    name: &str,
    limit: Option<RateLimit>,
    now: DateTime<Utc>,
) -> Result<()> {
    let t = D::table(schema, "rate_limits_t");
    match limit {
        Some(limit) => {
            let sql = format!(
                "INSERT INTO {t} (limit_scope, limit_name, limit_count, limit_window_ms, limit_starts, limit_updated_at_ts)
                 VALUES ($1, $2, $3, $4, '[]', $5) {}",
                D::upsert(
                    "limit_scope, limit_name",
                    &["limit_count", "limit_window_ms", "limit_updated_at_ts"]
                )
            );
            let count = i32::try_from(limit.count).unwrap_or(i32::MAX);
            let args = [
                Arg::Text(Some(scope)),
                Arg::Text(Some(name)),
                Arg::Int4(Some(count)),
                Arg::Int(Some(limit.window_ms())),
                Arg::Time(now),
            ];
            D::execute(pool, &sql, &args).await?;
        }
        None => {
            let sql = format!("DELETE FROM {t} WHERE limit_scope = $1 AND limit_name = $2");
            D::execute(pool, &sql, &[Arg::Text(Some(scope)), Arg::Text(Some(name))]).await?;
        }
    }
    Ok(())
}

/// Holds the limit of `name` in `scope` shut until `until` (a later hold it has stays);
/// whether it has a limit.
pub(crate) async fn hold<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    scope: &str,
    name: &str,
    until: DateTime<Utc>,
) -> Result<bool> {
    let t = D::table(schema, "rate_limits_t");
    let sql = format!(
        "UPDATE {t} SET limit_held_until_ts = CASE
            WHEN limit_held_until_ts IS NULL OR limit_held_until_ts < $3 THEN $3
            ELSE limit_held_until_ts END
         WHERE limit_scope = $1 AND limit_name = $2"
    );
    let args = [
        Arg::Text(Some(scope)),
        Arg::Text(Some(name)),
        Arg::Time(until),
    ];
    Ok(D::execute(pool, &sql, &args).await? > 0)
}

/// Every limit of `scope` as it stands at `now`, by name.
pub(crate) fn states<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    scope: &'a str,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<(String, RateState)>>
where
    Row: for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!("{} ORDER BY limit_name", select::<D>(schema, false));
        let rows: Vec<Row> = D::fetch_all(pool, &sql, &[Arg::Text(Some(scope))]).await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let limit = limit_of(&row.0, row.1, row.2);
                let log = StartLog::parse(&row.3, &limit, now);
                (row.0.clone(), log.state(limit, row.4, now))
            })
            .collect())
    })
}

/// The names with a limit: (queues, job types, queues with a limit per tenant), by
/// name, in one query.
pub(crate) fn names<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
) -> Boxed<'a, (Vec<String>, Vec<String>, Vec<String>)>
where
    (String, String): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT {}, {} FROM {} WHERE limit_scope IN ($1, $2, $3) ORDER BY limit_name",
            D::text("limit_scope"),
            D::text("limit_name"),
            D::table(schema, "rate_limits_t")
        );
        let args = [
            Arg::Text(Some(QUEUE)),
            Arg::Text(Some(TYPE)),
            Arg::Text(Some(TENANT)),
        ];
        let rows: Vec<(String, String)> = D::fetch_all(pool, &sql, &args).await?;
        let of = |scope: &str| -> Vec<String> {
            rows.iter()
                .filter(|r| r.0 == scope)
                .map(|r| r.1.clone())
                .collect()
        };
        Ok((of(QUEUE), of(TYPE), of(TENANT)))
    })
}

/// A limit a claim holds the row lock of: how many jobs it may start now.
pub(crate) struct Taken {
    scope: &'static str,
    name: String,
    limit: RateLimit,
    log: StartLog,
    held_until: Option<DateTime<Utc>>,
    /// Jobs the limit lets start now.
    pub(crate) room: i64,
}

/// A claim of a limited queue: the jobs, and when the limit lets the next start if it
/// held the claim back.
pub(crate) struct RatedClaim {
    pub(crate) jobs: Vec<super::ClaimedJob>,
    /// When the claim recorded its jobs' starts (`after_locks`).
    pub(crate) at: DateTime<Utc>,
    pub(crate) opens_at: Option<DateTime<Utc>>,
    /// Of a queue with a limit per tenant: the tenant the next claim's turn begins after
    /// (`fair::claim_within`).
    pub(crate) turn: Option<String>,
    /// Of a queue with a limit per tenant: the tenants with due jobs it passed over at
    /// their limit.
    pub(crate) held_tenants: usize,
}

/// A claim that `counts` starts against a rate (of the queue, a job type or each
/// tenant) as it stands once it holds its limits' row locks: `claim` moved on by the time
/// since it was `asked` (another worker's claim may have held them). Its jobs' starts
/// are recorded at its time, and their handlers may start until
/// `model::START_ALLOWANCE` after it: counted at the time asked, the starts of a claim
/// that waited fell before the handlers' by the wait (10-80 ms with three workers). A
/// claim that counts no start keeps its time, which its jobs' claim time is.
pub(crate) fn after_locks<'a>(
    claim: &super::Claim<'a>,
    asked: std::time::Instant,
    counts: bool,
) -> super::Claim<'a> {
    if !counts {
        return *claim;
    }
    let waited = chrono::Duration::from_std(asked.elapsed()).unwrap_or_default();
    super::Claim {
        now: claim.now + waited,
        lease_until: claim.lease_until + waited,
        ..*claim
    }
}

/// When a claim held back by two limits may start a job: when both let it (`None`: one
/// of them did not hold it).
pub(crate) fn later(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The one queue of a claim with a global limit (`claim.capped`).
///
/// # Errors
/// A capped claim of no queue or several (a bug in the producer).
pub(crate) fn capped_queue<'a>(claim: &super::Claim<'a>) -> Result<Option<&'a str>> {
    match (claim.capped, claim.queues) {
        (false, _) => Ok(None),
        (true, Some([queue])) => Ok(Some(queue)),
        (true, _) => Err(crate::Error::invalid(
            "claim",
            "a claim under a global limit names exactly one queue",
        )),
    }
}

/// The limits a claim took, in the order it locked them.
pub(crate) struct TakenAll(Vec<Taken>);

/// Locks and reads each of `keys` (scope, name) in order (`take`); a key without a limit
/// (lifted since the worker read its controls) is left out.
pub(crate) fn take_all<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    keys: &'a [(&'static str, &'a str)],
    now: DateTime<Utc>,
) -> Boxed<'a, TakenAll>
where
    Row: for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let mut taken = Vec::with_capacity(keys.len());
        for (scope, name) in keys {
            if let Some(one) = take::<D>(&mut *conn, schema, scope, name, now).await? {
                taken.push(one);
            }
        }
        Ok(TakenAll(taken))
    })
}

impl TakenAll {
    /// `limit` less than the room of every limit taken.
    pub(crate) fn room(&self, limit: i64) -> i64 {
        self.0.iter().fold(limit, |n, t| n.min(t.room))
    }

    /// Records `started` jobs against each limit; when the last of the full ones opens,
    /// if one is full.
    pub(crate) async fn spend<D: Dialect>(
        self,
        conn: &mut D::Connection,
        schema: &Schema,
        started: usize,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>> {
        let mut opens = None;
        for taken in self.0 {
            if let Some(at) = taken.spend::<D>(&mut *conn, schema, started, now).await? {
                opens = opens.max(Some(at));
            }
        }
        Ok(opens)
    }
}

/// Locks the limit of `name` in `scope` until the transaction on `conn` ends (the write
/// transaction does on SQLite) and reads its room at `now`; `None` if it has none (it
/// was lifted since the worker read its controls).
pub(crate) fn take<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    scope: &'static str,
    name: &'a str,
    now: DateTime<Utc>,
) -> Boxed<'a, Option<Taken>>
where
    Row: for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!("{}{}", select::<D>(schema, true), D::for_update());
        let args = [Arg::Text(Some(scope)), Arg::Text(Some(name))];
        let rows: Vec<Row> = D::fetch_all_on(conn, &sql, &args).await?;
        Ok(rows.into_iter().next().map(|row| {
            let limit = limit_of(&row.0, row.1, row.2);
            let log = StartLog::parse(&row.3, &limit, now);
            let room = log.room(&limit, row.4, now);
            Taken {
                scope,
                name: row.0,
                limit,
                log,
                held_until: row.4,
                room: i64::from(room),
            }
        }))
    })
}

impl Taken {
    /// Records `started` jobs at `now` in the log (in the claim's transaction, before it
    /// commits); when the limit next lets a job start if it has no room left.
    pub(crate) async fn spend<D: Dialect>(
        mut self,
        conn: &mut D::Connection,
        schema: &Schema,
        started: usize,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>> {
        let started = u32::try_from(started).unwrap_or(u32::MAX);
        if started > 0 {
            self.log.record(&self.limit, now, started);
            let sql = format!(
                "UPDATE {} SET limit_starts = $3 WHERE limit_scope = $1 AND limit_name = $2",
                D::table(schema, "rate_limits_t")
            );
            let text = self.log.text();
            let args = [
                Arg::Text(Some(self.scope)),
                Arg::Text(Some(&self.name)),
                Arg::Text(Some(&text)),
            ];
            D::execute_on(conn, &sql, &args).await?;
        }
        Ok((self.log.room(&self.limit, self.held_until, now) == 0)
            .then(|| self.log.opens_at(&self.limit, self.held_until, now))
            .flatten())
    }
}
