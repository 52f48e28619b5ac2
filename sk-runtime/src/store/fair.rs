//! Fair claims across tenants, written once over the [`Dialect`]: which tenants of a queue
//! have due jobs, in turn after the last one served, and how many jobs each may take of
//! one claim. Each backend's claim then takes each tenant's jobs in the claim's order
//! through the queue's fair index (PostgreSQL migration 19) and fills what is left of the
//! claim in the queue's own order (`Claim::fair`).

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Boxed, Dialect};
use super::Schema;
use crate::error::Result;

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
