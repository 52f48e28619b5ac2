//! Queues over several databases: each job's home database by its queue (or tenant)
//! ([`Routes`]), and the [`Router`] that enqueues there and hands out the client over all
//! of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::enqueue::{Enqueue, Enqueued};
use crate::error::{Error, Result};
use crate::job::Job;
use crate::store::{Backend, NewJob, Pool, Schema};

/// What a job's home database follows when its queue is not pinned ([`Routes::pin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RouteBy {
    /// A hash of the queue's name: every job of a queue lives in one database, so its
    /// limits, pause and fairness hold as on one database.
    #[default]
    Queue,
    /// A hash of the job's tenant ([`Enqueue::with_tenant`]), and of its queue's name
    /// for a job without one: a queue's tenants spread over the databases, each tenant
    /// in one. A queue's global and rate limits then hold per database.
    Tenant,
}

/// The rule that gives each job a home database among `databases` (numbered from 0):
/// pinned queues first, then a hash ([`RouteBy`]). The hash is jump consistent hashing
/// of FNV-1a: the same in every process and release, and going from n to n + 1
/// databases moves a key only to the new one (a 1 / (n + 1) share of the keys). Jobs
/// already stored stay where they are: the workers of their database run them.
///
/// ```
/// use sk_runtime::Routes;
///
/// let routes = Routes::new(2)?.pin("billing", 0)?;
/// assert_eq!(routes.home("billing", None), 0);
/// assert!(routes.home("mail", None) < 2);
/// # Ok::<(), sk_runtime::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    databases: usize,
    pins: BTreeMap<String, usize>,
    by: RouteBy,
}

impl Routes {
    /// Routes over `databases` databases by queue.
    ///
    /// # Errors
    /// [`Error::Invalid`] for no database.
    pub fn new(databases: usize) -> Result<Self> {
        if databases == 0 {
            return Err(Error::invalid(
                "databases",
                "a router needs at least one database",
            ));
        }
        Ok(Routes {
            databases,
            pins: BTreeMap::new(),
            by: RouteBy::Queue,
        })
    }

    /// Gives every job of `queue` the home `database`, whatever its tenant.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name or a database past the last.
    pub fn pin(mut self, queue: &str, database: usize) -> Result<Self> {
        crate::model::check_name("queue name", queue)?;
        if database >= self.databases {
            return Err(Error::invalid(
                "database",
                format!(
                    "queue {queue:?} is pinned to database {database}, but there are {} (numbered from 0)",
                    self.databases
                ),
            ));
        }
        self.pins.insert(queue.to_owned(), database);
        Ok(self)
    }

    /// Hashes what `by` says for the queues not pinned.
    #[must_use]
    pub fn by(mut self, by: RouteBy) -> Self {
        self.by = by;
        self
    }

    /// How many databases it routes over.
    pub fn databases(&self) -> usize {
        self.databases
    }

    /// The home database of a job of `queue` and `tenant`.
    pub fn home(&self, queue: &str, tenant: Option<&str>) -> usize {
        if let Some(&pinned) = self.pins.get(queue) {
            return pinned;
        }
        let key = match (self.by, tenant) {
            (RouteBy::Tenant, Some(tenant)) => tenant,
            _ => queue,
        };
        jump(fnv1a(key.as_bytes()), self.databases)
    }

    /// The home of a row about to be stored.
    pub(crate) fn home_of(&self, job: &NewJob) -> usize {
        self.home(&job.queue, job.tenant.as_deref())
    }
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Jump consistent hash (Lamping and Veach, 2014): the bucket of `key` among `buckets`.
fn jump(mut key: u64, buckets: usize) -> usize {
    let mut chosen: i64 = -1;
    let mut next: i64 = 0;
    while next < buckets as i64 {
        chosen = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        next = ((chosen + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    chosen as usize
}

/// Queues over several databases of one backend, as one system: each job goes to its
/// home database ([`Routes`]), a worker runs on each database
/// ([`Router::databases`]), and [`Router::client`] counts, lists and acts over all of
/// them. Each database holds sk's tables ([`migrate`](crate::migrate) each one).
///
/// A job and the jobs it waits on ([`Enqueue::after`], a [`Workflow`](crate::Workflow))
/// live in one database: a dependency in another database is refused, naming where it
/// lives. A unique key is unique within its home database, which is the same for every
/// job of a queue (or tenant). A transaction of the application's is on one database:
/// enqueue in it on [`Router::home`]'s pool.
///
/// ```no_run
/// # use sk_runtime::{job, JobError};
/// # #[job(queue = "mail")] async fn send_welcome(user_id: i64) -> Result<(), JobError> { Ok(()) }
/// # async fn f(a: sqlx::PgPool, b: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use sk_runtime::{Router, Worker};
///
/// let router = Router::new([a, b])?.pin("billing", 0)?;
/// let id = router.enqueue(SendWelcome::new(42)).await?; // on the home of queue "mail"
/// for pool in router.databases() {
///     let worker = Worker::builder(pool.clone()).build()?;
///     tokio::spawn(worker.run());
/// }
/// let counts = router.client().counts().await?; // summed over both databases
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Router<DB: Backend> {
    pools: Arc<[sqlx::Pool<DB>]>,
    routes: Routes,
    pub(crate) schema: Schema,
}

impl<DB: Backend> Router<DB>
where
    Pool: From<sqlx::Pool<DB>>,
{
    /// Routes over `pools` (database 0 first) by queue name.
    ///
    /// # Errors
    /// [`Error::Invalid`] for no pool.
    pub fn new(pools: impl IntoIterator<Item = sqlx::Pool<DB>>) -> Result<Self> {
        let pools: Arc<[sqlx::Pool<DB>]> = pools.into_iter().collect();
        Ok(Router {
            routes: Routes::new(pools.len())?,
            pools,
            schema: Schema::default(),
        })
    }

    /// Gives every job of `queue` the home `database` ([`Routes::pin`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name or a database past the last.
    pub fn pin(mut self, queue: &str, database: usize) -> Result<Self> {
        self.routes = self.routes.pin(queue, database)?;
        Ok(self)
    }

    /// Routes the queues not pinned by what `by` says ([`Routes::by`]).
    #[must_use]
    pub fn by(mut self, by: RouteBy) -> Self {
        self.routes = self.routes.by(by);
        self
    }

    /// Works on another schema/prefix in every database (a job that names its own with
    /// [`Enqueue::with_schema`] keeps it).
    #[must_use]
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = schema;
        self
    }

    /// The rule.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// The databases' pools, database 0 first: run a worker on each.
    pub fn databases(&self) -> &[sqlx::Pool<DB>] {
        &self.pools
    }

    /// The pool of the home database of a job of `queue` and `tenant`: begin there the
    /// transaction to enqueue in.
    pub fn home(&self, queue: &str, tenant: Option<&str>) -> &sqlx::Pool<DB> {
        &self.pools[self.routes.home(queue, tenant)]
    }

    /// Stores the job in its home database ([`Enqueue::enqueue`]).
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`]; [`Error::Invalid`] for a job that waits on a job of
    /// another database.
    pub async fn enqueue<J: Job>(&self, job: impl Into<Enqueue<J>>) -> Result<Uuid> {
        Ok(self.enqueue_outcome(job).await?.id)
    }

    /// As [`Router::enqueue`], and says what happened ([`Enqueue::enqueue_outcome`]).
    ///
    /// # Errors
    /// As [`Router::enqueue`].
    pub async fn enqueue_outcome<J: Job>(&self, job: impl Into<Enqueue<J>>) -> Result<Enqueued> {
        let now = crate::job::enqueue_now();
        let prepared = job.into().prepare(now, Some(&self.schema))?;
        let home = self.routes.home_of(&prepared.job);
        let (after, schema) = (prepared.after.clone(), prepared.schema.clone());
        match prepared.post(&self.pools[home], now).await {
            Err(e @ Error::Invalid { .. }) if e.to_string().contains("there is no job") => {
                Err(self
                    .elsewhere(home, &after, &schema, now)
                    .await
                    .unwrap_or(e))
            }
            done => done,
        }
    }

    /// Stores many jobs, one statement per home database, and returns their ids in the
    /// order given ([`Enqueue::enqueue_many`]). If any job is invalid, none is stored;
    /// the databases' statements are not one transaction: when one database fails, the
    /// jobs stored in the others stay.
    ///
    /// # Errors
    /// As [`Enqueue::enqueue_many`].
    pub async fn enqueue_many<J, I>(&self, jobs: I) -> Result<Vec<Uuid>>
    where
        J: Job,
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        let now = crate::job::enqueue_now();
        let (schema, rows) = Enqueue::<J>::rows_of(jobs, now, Some(&self.schema))?;
        let mut ids = vec![Uuid::nil(); rows.len()];
        let mut shares: Vec<(Vec<usize>, Vec<NewJob>)> =
            (0..self.pools.len()).map(|_| Default::default()).collect();
        for (at, row) in rows.into_iter().enumerate() {
            let share = &mut shares[self.routes.home_of(&row)];
            share.0.push(at);
            share.1.push(row);
        }
        let posts = shares
            .into_iter()
            .zip(self.pools.iter())
            .filter(|((places, _), _)| !places.is_empty())
            .map(|((places, rows), pool)| {
                let schema = &schema;
                async move {
                    let stored = Enqueue::<J>::post_rows(pool, schema, rows, now).await?;
                    Ok::<_, Error>((places, stored))
                }
            });
        for (places, stored) in futures_util::future::try_join_all(posts).await? {
            for (at, id) in places.into_iter().zip(stored) {
                ids[at] = id;
            }
        }
        Ok(ids)
    }

    /// The error for a job of database `home` that waits on a job its database does not
    /// hold: where the first of `after` that another database holds lives.
    async fn elsewhere(
        &self,
        home: usize,
        after: &[Uuid],
        schema: &Schema,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Error> {
        for (at, pool) in self.pools.iter().enumerate().filter(|(at, _)| *at != home) {
            let pool = Pool::from(pool.clone());
            for dep in after {
                match pool.job(schema, *dep, now).await {
                    Ok(Some(record)) => {
                        return Some(Error::invalid(
                            "dependency",
                            format!(
                                "job {dep} ({}, queue {:?}) lives in database {at}, and this job's home is database {home}: a job and the jobs it waits on share a database (pin their queues to one, Router::pin)",
                                record.task_type, record.queue
                            ),
                        ))
                    }
                    Ok(None) => {}
                    Err(e) => return Some(e),
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable_and_spreads_and_growing_moves_keys_only_to_the_new_database() {
        // Pinned values: a release that changed them would move every queue.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(jump(fnv1a(b"mail"), 1), 0);
        let two = Routes::new(2).unwrap();
        let three = Routes::new(3).unwrap();
        let mut per = [0usize; 3];
        for n in 0..3_000 {
            let queue = format!("q{n}");
            let (before, after) = (two.home(&queue, None), three.home(&queue, None));
            assert!(
                after == before || after == 2,
                "{queue} moved {before} -> {after}"
            );
            per[after] += 1;
        }
        assert!(per.iter().all(|n| (800..1_200).contains(n)), "{per:?}");
    }

    #[test]
    fn a_pin_wins_and_tenants_spread_a_queue() {
        let routes = Routes::new(4)
            .unwrap()
            .pin("billing", 3)
            .unwrap()
            .by(RouteBy::Tenant);
        assert_eq!(routes.home("billing", Some("acme")), 3);
        let homes: std::collections::BTreeSet<usize> = (0..64)
            .map(|n| routes.home("mail", Some(&format!("t{n}"))))
            .collect();
        assert_eq!(homes.len(), 4);
        assert_eq!(
            routes.home("mail", None),
            Routes::new(4).unwrap().home("mail", None)
        );
        assert!(Routes::new(0).is_err());
        let past = Routes::new(2).unwrap().pin("x", 2).unwrap_err().to_string();
        assert!(past.contains("database 2"), "{past}");
    }
}
