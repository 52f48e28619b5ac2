//! A pool that follows the primary of a replicated PostgreSQL cluster: the URL names
//! several hosts, as libpq's do (`postgres://h1:5432,h2:5432/app?target_session_attrs=read-write`,
//! what `pg_autoctl show uri` prints), and sk keeps the one that takes writes.
//!
//! sqlx connects to one host per pool. sk gives the pool the writable host's options and
//! watches it on a connection of its own: when that host stops answering, or takes no more
//! writes (a standby, or a promoted standby that the failover manager still holds
//! read-only), sk asks each host in turn and gives the pool the first writable one. Every
//! new connection is checked as well and refused on a read-only host, so a pool never
//! hands out a connection to a standby. A failover therefore costs what the failover
//! manager takes to promote, plus at most [`WATCH_EVERY`].

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection as _, PgConnection, PgPool};
use tokio::sync::Notify;

use super::work::address;
use crate::error::{Error, Result};

/// How often the watch asks the current host whether it still takes writes.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// How long a host may take to connect and answer before the watch moves on.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Whether a session takes writes, as libpq's `target_session_attrs=read-write` asks it.
const WRITABLE: &str = "SELECT current_setting('transaction_read_only') = 'off'";

/// The hosts of a URL, each with the URL's other options.
#[derive(Debug, Clone)]
pub(crate) struct Hosts(Vec<PgConnectOptions>);

impl Hosts {
    /// Parses `scheme://[user[:password]@]host[:port][,host[:port]...][/db][?params]`.
    /// `target_session_attrs`, if given, must ask for the primary (`read-write` or
    /// `primary`): sk writes on every connection.
    pub(crate) fn parse(url: &str) -> Result<Hosts> {
        let invalid = |reason: String| Error::invalid("database url", reason);
        let Some((scheme, rest)) = url.split_once("://").filter(|(_, rest)| {
            let authority = rest.split(['/', '?']).next().unwrap_or_default();
            let hosts = authority.rsplit('@').next().unwrap_or_default();
            hosts.contains(',')
        }) else {
            // One host: sqlx's own parse, and its own words for what is wrong.
            let one = url
                .parse::<PgConnectOptions>()
                .map_err(|e| invalid(e.to_string()))?;
            return Ok(Hosts(vec![one]));
        };
        let (user, rest) = match rest.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, rest),
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (hosts, tail) = rest.split_at(end);
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let mut params = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("target_session_attrs", "read-write" | "primary")) => {}
                Some(("target_session_attrs", other)) => {
                    return Err(invalid(format!(
                        "target_session_attrs={other}: sk writes on every connection, so it \
                         needs the primary (read-write or primary)"
                    )))
                }
                _ => params.push(pair),
            }
        }
        let params = if params.is_empty() {
            String::new()
        } else {
            format!("?{}", params.join("&"))
        };
        let mut list = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(invalid(format!("{url:?} has an empty host in its list")));
            }
            let user = user.map(|u| format!("{u}@")).unwrap_or_default();
            let one = format!("{scheme}://{user}{host}{path}{params}");
            let options = one
                .parse::<PgConnectOptions>()
                .map_err(|e| invalid(format!("host {host:?} of the list: {e}")))?;
            list.push(options);
        }
        Ok(Hosts(list))
    }

    /// Whether the URL names more than one host.
    pub(crate) fn several(&self) -> bool {
        self.0.len() > 1
    }

    /// Each host's options, in the URL's order.
    pub(crate) fn each(&self) -> impl Iterator<Item = &PgConnectOptions> {
        self.0.iter()
    }

    /// The first host's options.
    pub(crate) fn first(&self) -> PgConnectOptions {
        self.0[0].clone()
    }
}

/// A PostgreSQL pool on the writable host of `url`, which may name several hosts (the
/// module's docs): lazy, as `PgPoolOptions::connect_lazy` (the first connection is made
/// when the pool is first used), and from then on following the primary through
/// failovers. A URL of one host gives a plain lazy pool.
///
/// `options` keep their settings but these, which sk sets: `after_connect` refuses a
/// connection to a read-only host; `before_acquire` and `after_release` close, instead
/// of handing out again, a connection opened before the primary moved or one that does
/// not answer a ping within [`CALL_TIMEOUT`](crate::bounds::CALL_TIMEOUT) in the minute
/// after a call missed its bound; sqlx's slow-acquire warning goes to DEBUG, and its
/// statement logging is off (sk names a call past its bound itself, without the
/// statement's text). Call it within a Tokio runtime: the watch is a task of its own,
/// which ends when the pool is closed.
///
/// ```no_run
/// # async fn f() -> sk_runtime::Result<()> {
/// let pool = sk_runtime::primary_pool(
///     sk_runtime::sqlx::postgres::PgPoolOptions::new().max_connections(20),
///     "postgres://app@10.0.0.1:5432,10.0.0.2:5432/app?target_session_attrs=read-write",
/// )?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Invalid`] for a URL that does not parse, names an empty host, or asks
/// `target_session_attrs` for anything but the primary.
pub fn primary_pool(options: PgPoolOptions, url: &str) -> Result<PgPool> {
    primary_pool_from(options, Hosts::parse(url)?, 0)
}

/// [`primary_pool`] on `hosts`, connecting first to the host at `first`.
pub(crate) fn primary_pool_from(
    options: PgPoolOptions,
    hosts: Hosts,
    first: usize,
) -> Result<PgPool> {
    let options = crate::store::bound::hooks::on(options, crate::bounds::CALL_TIMEOUT);
    // sqlx's own slow-statement warning prints a statement whole (sk's completion is
    // ~7 KB); sk reports a slow call itself, by name, when it passes its bound.
    let hosts = Hosts(
        hosts
            .0
            .into_iter()
            .map(sqlx::ConnectOptions::disable_statement_logging)
            .collect(),
    );
    if !hosts.several() {
        return Ok(options.connect_lazy_with(hosts.first()));
    }
    let moved = Arc::new(Notify::new());
    let checked = moved.clone();
    let pool = options
        .after_connect(move |conn, _| {
            let checked = checked.clone();
            Box::pin(async move {
                if writable(conn).await? {
                    return Ok(());
                }
                // The host the pool connects to takes no writes: look again now.
                checked.notify_one();
                Err(sqlx::Error::Protocol(
                    "the host is read-only (a standby, or a primary being demoted or \
                     promoted); sk looks for the writable one"
                        .to_owned(),
                ))
            })
        })
        .connect_lazy_with(hosts.0[first].clone());
    tokio::spawn(watch(pool.clone(), hosts, first, moved));
    Ok(pool)
}

/// Asked in the simple protocol (no prepared statement), so it also holds behind a
/// transaction pooler.
async fn writable(conn: &mut PgConnection) -> sqlx::Result<bool> {
    use sqlx::{Executor as _, Row as _};
    conn.fetch_one(WRITABLE).await?.try_get(0)
}

/// Keeps `pool` on the writable host of `hosts` until the pool is closed.
async fn watch(pool: PgPool, hosts: Hosts, first: usize, moved: Arc<Notify>) {
    let mut current = first;
    let mut held: Option<PgConnection> = None;
    // Said once per outage, not at every look.
    let mut said = false;
    // The current host stopped answering (its probe timed out) since it last answered.
    let mut silent = false;
    while !pool.is_closed() {
        let still = match held.as_mut() {
            Some(conn) => match tokio::time::timeout(ANSWER_WITHIN, writable(conn)).await {
                Ok(Ok(true)) => {
                    silent = false;
                    true
                }
                Ok(_) => false,
                Err(_) => {
                    // The host stopped answering: from now the pool's returning
                    // connections are pinged under a bound, not sqlx's own ping, which
                    // would wait on a silent host for as long as the kernel keeps the
                    // socket, holding the connection's slot.
                    crate::store::bound::missed();
                    silent = true;
                    false
                }
            },
            None => false,
        };
        if !still {
            held = None;
            // Every host at once, so a silent one costs no more than its
            // `ANSWER_WITHIN`; the current host first among those that answer: a restart
            // of one primary is not a failover.
            let mut found = writable_hosts(&hosts).await;
            found.sort_by_key(|(i, _)| (*i + hosts.0.len() - current) % hosts.0.len());
            if let Some((i, conn)) = found.into_iter().next() {
                if i != current {
                    let from = address(&hosts.0[current]);
                    tracing::warn!(
                        from = %from,
                        to = %address(&hosts.0[i]),
                        "sk: the writable PostgreSQL host moved; new connections go to the new one"
                    );
                    pool.set_connect_options(hosts.0[i].clone());
                    current = i;
                    // The connections open now are to the old host: none is handed out
                    // again (`bound::hooks`).
                    crate::store::bound::moved();
                    if std::mem::take(&mut silent) {
                        // The calls still waiting on it would wait for their bound.
                        crate::store::bound::left_silent_host(from);
                    }
                    crate::bus::database_moved();
                }
                held = Some(conn);
                said = false;
            }
            if held.is_none() && !said {
                said = true;
                tracing::warn!(
                    hosts = hosts.0.len(),
                    "sk: no PostgreSQL host of the list takes writes; asking again"
                );
            }
        }
        tokio::select! {
            () = moved.notified() => {}
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

/// The hosts of `hosts` that answer in time and take writes, each with a connection, by
/// index; asked all at once.
pub(crate) async fn writable_hosts(hosts: &Hosts) -> Vec<(usize, PgConnection)> {
    let asks = hosts
        .0
        .iter()
        .enumerate()
        .map(|(i, options)| async move { writable_at(options).await.map(|conn| (i, conn)) });
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// A connection to `options`' host if it answers in time and takes writes.
async fn writable_at(options: &PgConnectOptions) -> Option<PgConnection> {
    let attempt = async {
        let mut conn = PgConnection::connect_with(options).await?;
        if writable(&mut conn).await? {
            Ok(Some(conn))
        } else {
            let _ = conn.close().await;
            Ok::<_, sqlx::Error>(None)
        }
    };
    match tokio::time::timeout(ANSWER_WITHIN, attempt).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(_)) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_list_is_one_options_per_host_with_the_rest_of_the_url() {
        let hosts = Hosts::parse(
            "postgres://app:secret@10.0.0.1:6101,10.0.0.2/jobs?target_session_attrs=read-write&sslmode=disable",
        )
        .unwrap();
        assert_eq!(hosts.0.len(), 2);
        assert!(hosts.several());
        let (a, b) = (&hosts.0[0], &hosts.0[1]);
        assert_eq!((a.get_host(), a.get_port()), ("10.0.0.1", 6101));
        assert_eq!((b.get_host(), b.get_port()), ("10.0.0.2", 5432));
        for o in [a, b] {
            assert_eq!(o.get_username(), "app");
            assert_eq!(o.get_database(), Some("jobs"));
        }
        let one = Hosts::parse("postgres://127.0.0.1:5432/postgres").unwrap();
        assert!(!one.several());
        let comma_in_password = Hosts::parse("postgres://app:a,b@10.0.0.1/jobs").unwrap();
        assert!(!comma_in_password.several());
    }

    #[test]
    fn a_url_that_asks_for_a_standby_or_names_an_empty_host_is_refused() {
        for url in [
            "postgres://a,b/db?target_session_attrs=read-only",
            "postgres://a,,b/db",
            "127.0.0.1:5432",
        ] {
            let e = Hosts::parse(url).unwrap_err().to_string();
            assert!(e.contains("database url"), "{url}: {e}");
        }
    }
}
