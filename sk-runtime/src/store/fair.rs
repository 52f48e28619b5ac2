//! Fair claims across tenants, written once over the [`Dialect`] and a backend's claim
//! [`Steps`]: which tenants of a queue have due jobs, in turn after the last one served,
//! and how many jobs each may take of one claim ([`claim`]), or, under limits per tenant
//! (`store::tenants`), of its room ([`claim_within`]). Each backend's steps take each
//! tenant's jobs in the claim's order through the queue's fair index (PostgreSQL
//! migration 19), and what is left of the claim in the queue's own order
//! (`Claim::fair`).

use std::future::Future;

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Boxed, Dialect};
use super::tenants::TenantRoom;
use super::{Claim, Schema};
use crate::error::Result;

/// A backend's steps of a claim, on the claim's connection (or transaction), from which
/// [`claim`] makes a fair claim once for every backend.
pub(crate) trait Steps {
    /// The connection the claim runs on.
    type Conn: Send;
    /// A claimed job as the backend returns it.
    type Job: OfTenant + Send;
    /// Up to `limit` tenants of `queue` with due jobs, in turn after `after` ([`due_keys`]).
    fn keys<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        queue: &'a str,
        after: &'a str,
        limit: i64,
        now: DateTime<Utc>,
    ) -> Boxed<'a, Vec<String>>;
    /// Up to `each` due jobs of each tenant of `keys`, of the one queue `claim` names.
    fn take(
        &self,
        conn: &mut Self::Conn,
        claim: &Claim<'_>,
        keys: &[String],
        each: i64,
    ) -> impl Future<Output = Result<Vec<Self::Job>>> + Send;
    /// The logs of starts of `tenants` of `queue` that have one ([`tenants::logs`]).
    ///
    /// [`tenants::logs`]: super::tenants::logs
    fn tenant_logs<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        queue: &'a str,
        tenants: &'a [String],
        limit: crate::model::RateLimit,
        now: DateTime<Utc>,
    ) -> Boxed<'a, std::collections::HashMap<String, super::tenants::Log>>;
    /// Writes the tenants' logs of starts `logs` ([`tenants::record`]).
    ///
    /// [`tenants::record`]: super::tenants::record
    fn record_starts<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        queue: &'a str,
        logs: &'a [(String, String)],
        now: DateTime<Utc>,
    ) -> Boxed<'a, ()>;
    /// Up to `limit` of the jobs `claim` asks for, in the queues' order (of those
    /// without a tenant only, if `claim.untenanted`).
    fn rest(
        &self,
        conn: &mut Self::Conn,
        claim: &Claim<'_>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Self::Job>>> + Send;
    /// The error a step of the claim returns for `error` (a backend may tell a lost
    /// connection apart).
    fn mend(&self, error: crate::error::Error) -> crate::error::Error {
        error
    }
}

/// The steps a backend's [`Steps`] impl takes through the [`Dialect`] `$db` unchanged:
/// `keys` ([`due_keys`]), `tenant_logs` and `record_starts`, each error passed through
/// [`Steps::mend`].
macro_rules! dialect_steps {
    ($db:ty) => {
        fn keys<'a>(
            &'a self,
            conn: &'a mut Self::Conn,
            queue: &'a str,
            after: &'a str,
            limit: i64,
            now: chrono::DateTime<chrono::Utc>,
        ) -> $crate::store::dialect::Boxed<'a, Vec<String>> {
            $crate::store::fair::mended(
                self,
                $crate::store::fair::due_keys::<$db>(conn, &self.schema, queue, after, limit, now),
            )
        }

        fn tenant_logs<'a>(
            &'a self,
            conn: &'a mut Self::Conn,
            queue: &'a str,
            tenants: &'a [String],
            limit: $crate::model::RateLimit,
            now: chrono::DateTime<chrono::Utc>,
        ) -> $crate::store::dialect::Boxed<
            'a,
            std::collections::HashMap<String, $crate::store::tenants::Log>,
        > {
            $crate::store::fair::mended(
                self,
                $crate::store::tenants::logs::<$db>(conn, &self.schema, queue, tenants, limit, now),
            )
        }

        fn record_starts<'a>(
            &'a self,
            conn: &'a mut Self::Conn,
            queue: &'a str,
            logs: &'a [(String, String)],
            now: chrono::DateTime<chrono::Utc>,
        ) -> $crate::store::dialect::Boxed<'a, ()> {
            $crate::store::fair::mended(
                self,
                $crate::store::tenants::record::<$db>(conn, &self.schema, queue, logs, now),
            )
        }
    };
}
pub(crate) use dialect_steps;

/// `step`, its error passed through the store's [`Steps::mend`].
pub(crate) fn mended<'a, S: Steps + Sync, T: 'a>(store: &'a S, step: Boxed<'a, T>) -> Boxed<'a, T> {
    Box::pin(async move { step.await.map_err(|e| store.mend(e)) })
}

/// Up to `limit` of the jobs `claim` asks for: of a fair queue, a share of each tenant
/// with due jobs (of the worker's tenants, if it is pinned to some) in turn, the rest of
/// the first whose share was full ([`refill`]), then what they left in the queue's
/// order (jobs without a tenant among them); of other queues, the queues' order.
pub(crate) async fn claim<S: Steps + Sync>(
    store: &S,
    conn: &mut S::Conn,
    claim: &Claim<'_>,
    limit: i64,
) -> Result<Vec<S::Job>> {
    let (Some(after), Some([queue])) = (claim.fair, claim.queues) else {
        return store.rest(conn, claim, limit).await;
    };
    if claim.paused.contains(queue) || limit <= 0 {
        return Ok(Vec::new());
    }
    let mut keys = store.keys(conn, queue, after, limit, claim.now).await?;
    if let Some(tenants) = claim.tenants {
        keys.retain(|k| tenants.contains(k));
    }
    let mut jobs = Vec::new();
    if !keys.is_empty() {
        let share = share(limit, keys.len());
        jobs = store.take(conn, claim, &keys, share).await?;
        let left = limit - jobs.len() as i64;
        let served = jobs.iter().map(OfTenant::tenant);
        if let Some(key) = refill(&keys, share, served).filter(|_| left > 0) {
            let key = [key.clone()];
            jobs.extend(store.take(conn, claim, &key, left).await?);
        }
    }
    let rest = limit - jobs.len() as i64;
    if rest > 0 {
        let rest_claim = Claim {
            fair: None,
            ..*claim
        };
        jobs.extend(store.rest(conn, &rest_claim, rest).await?);
    }
    Ok(jobs)
}

/// A tenant and how many of its jobs may start now.
type Roomed<'a> = (&'a String, i64);

/// What [`claim_within`] took.
pub(crate) struct Served<J> {
    pub(crate) jobs: Vec<J>,
    /// Of a queue with limits per tenant: the tenant the next claim's turn begins after.
    pub(crate) turn: Option<String>,
    /// Tenants with due jobs passed over at their limits.
    pub(crate) passed: usize,
    /// When the first of those may start a job, if each was held by its rate and the
    /// claim took nothing.
    pub(crate) opens_at: Option<DateTime<Utc>>,
}

impl<J> Served<J> {
    pub(crate) fn none() -> Self {
        Served {
            jobs: Vec::new(),
            turn: None,
            passed: 0,
            opens_at: None,
        }
    }
}

/// Up to `limit` of the jobs `claim` asks for, in the transaction on `conn`. Of a queue
/// with limits per tenant (`room`, read first by [`tenants::room`] under the queue's
/// locks): the tenants with due jobs in turn after `claim.fair`, each up to an equal
/// share of the claim and its own room (the least its limits leave it), then more of
/// those that filled their share while they have room, then jobs without a tenant in the
/// queue's order; a tenant at its limit is passed over and holds back no one else's
/// jobs; the tenants' starts are recorded against their rate. Of other queues,
/// [`claim`].
///
/// [`tenants::room`]: super::tenants::room
pub(crate) async fn claim_within<S: Steps + Sync>(
    store: &S,
    conn: &mut S::Conn,
    claim: &Claim<'_>,
    limit: i64,
    room: Option<&mut TenantRoom>,
) -> Result<Served<S::Job>> {
    let (Some(room), Some(after), Some([queue])) = (room, claim.fair, claim.queues) else {
        let jobs = self::claim(store, conn, claim, limit).await?;
        return Ok(Served {
            jobs,
            ..Served::none()
        });
    };
    if claim.paused.contains(queue) || limit <= 0 {
        return Ok(Served::none());
    }
    // Tenants at their limit are passed over, so more are read than the claim can serve.
    let read = limit.saturating_mul(2).clamp(8, 256);
    let mut keys = store.keys(conn, queue, after, read, claim.now).await?;
    if let Some(tenants) = claim.tenants {
        keys.retain(|k| tenants.contains(k));
    }
    if let Some(rate) = room.rate {
        room.logs = store
            .tenant_logs(conn, queue, &keys, rate, claim.now)
            .await?;
    }
    let (mut open, held): (Vec<Roomed<'_>>, Vec<Roomed<'_>>) = keys
        .iter()
        .map(|k| (k, room.of(k)))
        .partition(|(_, n)| *n > 0);
    let served_all = i64::try_from(open.len()).is_ok_and(|n| n <= limit);
    open.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    // The next turn begins after the last tenant served, or, when every tenant with
    // room was, after the last one read (those at their limit wait their own turn).
    let turn = if served_all {
        keys.last()
    } else {
        open.last().map(|(k, _)| *k)
    }
    .cloned();
    let mut jobs = Vec::new();
    let share = share(limit, open.len());
    // Tenants whose room is at least the share are claimed in one step; the others
    // each up to their room.
    let (whole, short): (Vec<_>, Vec<_>) = open.iter().partition(|(_, n)| *n >= share);
    let whole: Vec<String> = whole.iter().map(|(k, _)| (*k).clone()).collect();
    if !whole.is_empty() {
        jobs = store.take(conn, claim, &whole, share).await?;
    }
    for (key, n) in short {
        jobs.extend(
            store
                .take(conn, claim, std::slice::from_ref(key), n)
                .await?,
        );
    }
    // More of the tenants that filled their share, in turn, while the claim has room.
    for (key, n) in &open {
        let left = limit - jobs.len() as i64;
        if left <= 0 {
            break;
        }
        let taken = jobs
            .iter()
            .filter(|j| j.tenant() == Some(key.as_str()))
            .count() as i64;
        if taken == share.min(*n) && *n > taken {
            let more = (*n - taken).min(left);
            jobs.extend(
                store
                    .take(conn, claim, std::slice::from_ref(*key), more)
                    .await?,
            );
        }
    }
    let logs = room.record(jobs.iter().filter_map(OfTenant::tenant));
    if !logs.is_empty() {
        store.record_starts(conn, queue, &logs, claim.now).await?;
    }
    let rest = limit - jobs.len() as i64;
    if rest > 0 && claim.tenants.is_none() {
        let untenanted = Claim {
            fair: None,
            untenanted: true,
            ..*claim
        };
        jobs.extend(store.rest(conn, &untenanted, rest).await?);
    }
    // Only a claim that found nothing to start waits for the first opening: one that
    // started jobs claims again as they end, and so serves the other tenants at once.
    let opens_at = if jobs.is_empty() && !held.is_empty() {
        room.opens_at(held.iter().map(|(k, _)| *k))
    } else {
        None
    };
    Ok(Served {
        jobs,
        turn,
        passed: held.len(),
        opens_at,
    })
}

/// Up to `limit` tenants of `queue` with due jobs, in name order from the first after
/// `after`, then (when fewer) from the first: a skip scan of the fair index, one probe
/// per tenant, on the claim's own connection.
///
/// (Boxed: inside the backends' claims, an `async fn` with this bound on its rows trips
/// the compiler's limits on higher-ranked lifetimes, rust-lang/rust#100013.)
pub(crate) fn due_keys<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    queue: &'a str,
    after: &'a str,
    limit: i64,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<String>>
where
    (String,): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let q = D::table(schema, "tasks_queue_t");
        let tenant = D::bytewise("task_tenant");
        let next = |after: &str| {
            format!(
                "(SELECT {} FROM {q} WHERE task_queue = $1 AND {tenant} > {after}
                AND task_locked_until_ts <= $3 ORDER BY {tenant} LIMIT 1)",
                D::text("task_tenant")
            )
        };
        if !D::SKIP_SCAN_IN_ONE {
            // One probe a statement: after `after`, then round from the first up to it.
            let step = format!(
                "SELECT {} FROM {q} WHERE task_queue = $1 AND {tenant} > $2
                AND task_locked_until_ts <= $3 ORDER BY {tenant} LIMIT $4",
                D::text("task_tenant")
            );
            let mut keys: Vec<String> = Vec::new();
            let mut from = after.to_owned();
            let mut round = after.is_empty();
            while (keys.len() as i64) < limit {
                match keys_after::<D>(conn, &step, queue, &from, 1, now)
                    .await?
                    .pop()
                {
                    Some(key) if round && !after.is_empty() && key.as_str() > after => break,
                    Some(key) => {
                        from.clone_from(&key);
                        keys.push(key);
                    }
                    None if !round => {
                        round = true;
                        from.clear();
                    }
                    None => break,
                }
            }
            return Ok(keys);
        }
        let sql = format!(
            "WITH RECURSIVE k(tenant, n) AS (
            SELECT {}, 1
            UNION ALL
            SELECT {}, n + 1 FROM k WHERE k.tenant IS NOT NULL AND n < $4
         )
         SELECT tenant FROM k WHERE tenant IS NOT NULL",
            next("$2"),
            next("k.tenant")
        );
        let mut keys = keys_after::<D>(conn, &sql, queue, after, limit, now).await?;
        let short = limit - keys.len() as i64;
        if short > 0 && !after.is_empty() {
            // Round the turn: the first tenants again, up to the one after which it began.
            let round = keys_after::<D>(conn, &sql, queue, "", short, now).await?;
            keys.extend(round.into_iter().filter(|k| k.as_str() <= after));
        }
        Ok(keys)
    })
}

/// Up to `limit` tenants of `queue` with due jobs after `from`, by `sql` (`due_keys`).
async fn keys_after<D: Dialect>(
    conn: &mut D::Connection,
    sql: &str,
    queue: &str,
    from: &str,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Vec<String>>
where
    (String,): for<'r> sqlx::FromRow<'r, D::Row>,
{
    let args = [
        Arg::Text(Some(queue)),
        Arg::Text(Some(from)),
        Arg::Time(now),
        Arg::Int(Some(limit)),
    ];
    let found: Vec<(String,)> = D::fetch_all_on(conn, sql, &args).await?;
    Ok(found.into_iter().map(|(k,)| k).collect())
}

/// How many jobs each of `keys` tenants may take of a claim of `limit`: an equal share,
/// at least one (the keys are never more than the limit).
pub(crate) fn share(limit: i64, keys: usize) -> i64 {
    (limit / i64::try_from(keys.max(1)).unwrap_or(i64::MAX)).max(1)
}

/// A claimed job's tenant (SQLite's come with their lock handles).
pub(crate) trait OfTenant {
    fn tenant(&self) -> Option<&str>;
}

impl OfTenant for super::ClaimedJob {
    fn tenant(&self) -> Option<&str> {
        self.task_tenant.as_deref()
    }
}

impl OfTenant for (i64, super::ClaimedJob) {
    fn tenant(&self) -> Option<&str> {
        self.1.task_tenant.as_deref()
    }
}

/// The tenant that takes what a fair claim's shares left (the first whose share was
/// full, so it may have more), before the queue's order does: through the tenants'
/// index, not the claim-order index, whose entries of rows the fair claims changed are
/// not marked dead until a scan of it meets them (on PostgreSQL, a claim in the queue's
/// order after a few seconds of fair claims took 150 to 210 ms instead of 20).
pub(crate) fn refill<'a>(
    keys: &'a [String],
    share: i64,
    served: impl Iterator<Item = Option<&'a str>> + Clone,
) -> Option<&'a String> {
    keys.iter().find(|key| {
        let taken = served.clone().filter(|t| *t == Some(key.as_str())).count();
        i64::try_from(taken).is_ok_and(|n| n >= share)
    })
}

/// The tenant a fair claim's turn goes on after: the last of those it served in the
/// turn's order (after `after`, then round from the first).
pub(crate) fn next_after<'a>(after: &str, served: impl Iterator<Item = &'a str>) -> String {
    let served: Vec<&str> = served.collect();
    let round: Option<&str> = served.iter().copied().filter(|k| *k <= after).max();
    round
        .or_else(|| served.iter().copied().max())
        .unwrap_or(after)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_equal_and_never_nothing() {
        assert_eq!(share(16, 2), 8);
        assert_eq!(share(16, 3), 5);
        assert_eq!(share(16, 16), 1);
        assert_eq!(share(1, 1), 1);
        assert_eq!(share(4, 0), 4);
    }

    #[test]
    fn the_first_full_share_takes_what_is_left() {
        let keys = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let served = [Some("b"), Some("a"), Some("b"), None];
        assert_eq!(refill(&keys, 2, served.iter().copied()), Some(&keys[1]));
        assert_eq!(refill(&keys, 1, served.iter().copied()), Some(&keys[0]));
        assert_eq!(refill(&keys, 3, served.iter().copied()), None);
    }

    #[test]
    fn the_turn_goes_on_after_the_last_tenant_served() {
        assert_eq!(next_after("", ["a", "c", "b"].into_iter()), "c");
        assert_eq!(next_after("c", ["d", "e"].into_iter()), "e");
        // Round from the first: "a" and "b" came after "e" and "f".
        assert_eq!(next_after("d", ["e", "f", "a", "b"].into_iter()), "b");
        assert_eq!(next_after("d", std::iter::empty()), "d");
    }
}
