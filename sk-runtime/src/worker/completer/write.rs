//! Writing a batch of outcomes: each cut to what the tables hold, written in calls of a
//! bounded size, a call the database refuses for what a row holds halved down to the
//! refused outcome, and retried while the database is away.

use std::collections::HashSet;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::store::{Failure, Lease, Success};

use super::super::Shared;
use super::MAX_BATCH;

/// The most of an error's kind, message and detail stored per attempt (documented on
/// [`JobError`]; MySQL's kind column is a `VARCHAR(255)`).
pub(super) const MAX_KIND_BYTES: usize = 255;

pub(super) const MAX_MESSAGE_BYTES: usize = 8 * 1024;

pub(super) const MAX_DETAIL_BYTES: usize = 32 * 1024;

/// `text` as an error is stored (documented on [`JobError`]): a NUL as U+FFFD, which every
/// backend's text holds (PostgreSQL refused the whole batch of failures for one NUL),
/// then cut by `clip`.
pub(super) fn storable(text: String, limit: usize) -> String {
    let text = if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text
    };
    clip(text, limit)
}

/// `text` cut to at most `limit` bytes, marker included: cut at a character boundary and
/// followed by a marker saying how many bytes were left out.
pub(super) fn clip(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    // The marker's room, for the longest count it can hold (no more than the whole text).
    let room = marker(text.len()).len();
    let mut end = limit.saturating_sub(room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let more = marker(text.len() - end);
    text.truncate(end);
    text.push_str(&more);
    text
}

fn marker(bytes: usize) -> String {
    format!("… [{bytes} bytes more]")
}

/// An outcome the completer writes in batches: a success or a failure.
pub(super) trait Record: Sized {
    /// What the store answers for each outcome of a batch it wrote.
    type Written: Send;
    /// What the outcome is called in the log, and what `degraded` leaves out.
    const WHAT: &'static str;
    const LEFT_OUT: &'static str;
    fn lease(&self) -> Lease;
    /// The bytes of its own it sends to the store (its output, or its error's text).
    fn bytes(&self) -> usize;
    fn write<'a>(
        store: &'a crate::store::Store,
        batch: &'a [Self],
        now: chrono::DateTime<chrono::Utc>,
    ) -> impl std::future::Future<Output = Result<Vec<Self::Written>>> + Send + 'a;
    /// What the store's answer holds for an outcome not written.
    fn unwritten(answer: &mut Vec<Self::Written>);
    /// The outcome without what the database may have refused in it.
    fn degraded(&self, refusal: &Error) -> Self;
    /// After a write that was tried more than once: `written` with the outcomes of
    /// `batch` an earlier try committed before its reply was lost.
    fn committed_before(
        shared: &Shared,
        batch: &[Self],
        written: Vec<Self::Written>,
    ) -> impl std::future::Future<Output = Vec<Self::Written>> + Send {
        let _ = (shared, batch);
        std::future::ready(written)
    }
}

impl Record for Success {
    /// The ids recorded (a fenced success is left out).
    type Written = uuid::Uuid;
    const WHAT: &'static str = "result";
    const LEFT_OUT: &'static str = "its output";
    fn lease(&self) -> Lease {
        self.lease
    }
    fn bytes(&self) -> usize {
        self.output.as_ref().map_or(0, String::len)
    }
    fn write<'a>(
        store: &'a crate::store::Store,
        batch: &'a [Self],
        now: chrono::DateTime<chrono::Utc>,
    ) -> impl std::future::Future<Output = Result<Vec<uuid::Uuid>>> + Send + 'a {
        store.complete(batch, now)
    }
    fn unwritten(_: &mut Vec<uuid::Uuid>) {}
    fn degraded(&self, _: &Error) -> Self {
        Success {
            output: None,
            ..*self
        }
    }
    /// A retried completion finds no lease for what an earlier try committed: those are
    /// this worker's own results (not a lease lost to another worker), found by the
    /// results rows it finished.
    async fn committed_before(
        shared: &Shared,
        batch: &[Self],
        mut written: Vec<uuid::Uuid>,
    ) -> Vec<uuid::Uuid> {
        let missing: Vec<uuid::Uuid> = batch
            .iter()
            .map(|s| s.lease.id)
            .filter(|id| !written.contains(id))
            .collect();
        if missing.is_empty() {
            return written;
        }
        match shared.store.succeeded_here(&missing).await {
            Ok(ours) => {
                for id in &ours {
                    tracing::info!(%id, "sk: the job's result was recorded by an earlier try, whose reply was lost; recorded once");
                }
                written.extend(ours);
            }
            Err(e) => {
                tracing::debug!("sk: cannot read back the results of a retried completion: {e}")
            }
        }
        written
    }
}

impl Record for Failure {
    /// Per failure, whether its lease was held.
    type Written = bool;
    const WHAT: &'static str = "failure";
    const LEFT_OUT: &'static str = "its error's text";
    fn lease(&self) -> Lease {
        self.lease
    }
    fn bytes(&self) -> usize {
        self.kind.len() + self.message.len() + self.detail.as_ref().map_or(0, String::len)
    }
    fn write<'a>(
        store: &'a crate::store::Store,
        batch: &'a [Self],
        now: chrono::DateTime<chrono::Utc>,
    ) -> impl std::future::Future<Output = Result<Vec<bool>>> + Send + 'a {
        store.fail(batch, now)
    }
    fn unwritten(answer: &mut Vec<bool>) {
        answer.push(false);
    }
    fn degraded(&self, refusal: &Error) -> Self {
        Failure {
            kind: "sk::unstorable".into(),
            message: storable(
                format!("the database refused to store this run's error: {refusal}"),
                MAX_MESSAGE_BYTES,
            ),
            detail: None,
            ..*self
        }
    }
}

/// Writes a batch of outcomes as `persist` does, except when the database refuses it for
/// what its rows hold (`store::refused_for_its_rows`), which no retry mends: one outcome
/// it cannot store would hold the whole batch, and every batch after it, for ever. The
/// batch is then halved until the refused outcome is alone, and that one is written
/// without its output or its error's text. An outcome refused even so is not recorded;
/// its lease runs out and it runs again. The leases of outcomes not written (those, and
/// all the rest when the worker gives up while stopping) go into `unrecorded`.
pub(super) async fn write_batch<R: Record>(
    shared: &Shared,
    what: &str,
    batch: &[R],
    now: chrono::DateTime<chrono::Utc>,
    unrecorded: &mut HashSet<Lease>,
) -> Vec<R::Written> {
    let mut answer = Vec::with_capacity(batch.len());
    // Parts still to write, the next on top: the answer comes in the batch's order.
    let mut parts = crate::store::parts(batch, MAX_BATCH, MAX_CALL_BYTES, R::bytes);
    parts.reverse();
    while let Some(range) = parts.pop() {
        let part = &batch[range.clone()];
        let mut tries = 0;
        let written = attempt(shared, what, true, || {
            tries += 1;
            R::write(&shared.store, part, now)
        })
        .await;
        let refusal = match written {
            Written::Done(written) if tries > 1 => {
                answer.extend(R::committed_before(shared, part, written).await);
                continue;
            }
            Written::Done(written) => {
                answer.extend(written);
                continue;
            }
            Written::Refused(refusal) => refusal,
            Written::GaveUp => return gave_up(&batch[range.start..], unrecorded, answer),
        };
        if part.len() > 1 {
            tracing::warn!(
                "sk: the database refused to {what} for what some of these {} hold; writing them in halves to find those: {refusal}",
                part.len()
            );
            let middle = range.start + part.len() / 2;
            parts.push(middle..range.end);
            parts.push(range.start..middle);
            continue;
        }
        let one = &part[0];
        let lease = one.lease();
        tracing::error!(id = %lease.id, attempt = lease.attempt, "sk: the database refused this job's {}, recorded without {}: {refusal}", R::WHAT, R::LEFT_OUT);
        let degraded = [one.degraded(&refusal)];
        match attempt(shared, what, true, || {
            R::write(&shared.store, &degraded, now)
        })
        .await
        {
            Written::Done(written) => answer.extend(written),
            Written::Refused(again) => {
                tracing::error!(id = %lease.id, attempt = lease.attempt, "sk: the database refused this job's {} even without {}; not recorded, the job runs again once its lease runs out: {again}", R::WHAT, R::LEFT_OUT);
                unrecorded.insert(lease);
                R::unwritten(&mut answer);
            }
            Written::GaveUp => return gave_up(&batch[range.start..], unrecorded, answer),
        }
    }
    answer
}

/// The most bytes of outputs and error texts sent to the store in one call: a batch of
/// large ones is written in several. PostgreSQL takes at most 1 GiB in one parameter, and
/// MySQL at most `max_allowed_packet` (16 MiB on MariaDB) in one statement; beyond that
/// the call failed each time it was tried, holding its batch for ever.
const MAX_CALL_BYTES: usize = 8 * 1024 * 1024;

/// The answer to a batch whose `rest` was not written, as the worker gave up while
/// stopping.
fn gave_up<R: Record>(
    rest: &[R],
    unrecorded: &mut HashSet<Lease>,
    mut answer: Vec<R::Written>,
) -> Vec<R::Written> {
    for r in rest {
        unrecorded.insert(r.lease());
        R::unwritten(&mut answer);
    }
    answer
}

/// How a store call ended.
pub(super) enum Written<T> {
    Done(T),
    /// Refused for what its rows hold (only when asked to tell it apart).
    Refused(Error),
    /// Given up while stopping.
    GaveUp,
}

/// Retries a store call until it succeeds. Once the worker is stopping it gives up after
/// the grace period; the jobs' leases then run out and they run again elsewhere
/// (at-least-once), which is the only safe outcome without a database.
async fn persist<T, F, Fut>(shared: &Shared, what: &str, call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    match attempt(shared, what, false, call).await {
        Written::Done(value) => Some(value),
        Written::Refused(_) | Written::GaveUp => None,
    }
}

/// `persist` for a give back or a snooze, which only hasten what a lease's end does anyway:
/// tried for at most one lease, after which the leases have run out and another worker
/// may hold the jobs (a snooze then runs sooner, after a lost attempt). Retrying any error
/// for ever held every outcome behind it.
pub(super) async fn persist_for_a_lease<T, F, Fut>(
    shared: &Shared,
    what: &str,
    mut call: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let lease = shared.config.lease;
    match tokio::time::timeout(lease, persist(shared, what, &mut call)).await {
        Ok(done) => done,
        Err(_) => {
            tracing::error!(
                "sk: gave up trying to {what} after {}: the leases have run out, and the jobs run again on another claim",
                humantime::format_duration(lease)
            );
            None
        }
    }
}

/// `persist`, which returns at once an error that refuses the call for what its rows hold
/// if `refusals` (else it retries that as any other).
async fn attempt<T, F, Fut>(shared: &Shared, what: &str, refusals: bool, mut call: F) -> Written<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut failures = 0;
    let mut stopping_since: Option<Instant> = None;
    loop {
        match call().await {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!("sk: could {what} again after {failures} failed attempts");
                }
                return Written::Done(value);
            }
            Err(e) if refusals && crate::store::refused_for_its_rows(&e) => {
                return Written::Refused(e);
            }
            Err(e) => {
                failures += 1;
                let wait = crate::retry::database_backoff(failures);
                crate::store::bound::warn_unless_moved!(
                    &e,
                    "sk: cannot {what} (attempt {failures}), retrying in {}: {e}",
                    crate::clock::shown(wait)
                );
                if shared.stopping.is_cancelled() {
                    let since = *stopping_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > shared.config.grace_period {
                        tracing::error!("sk: giving up to {what} while stopping; those jobs run again once their lease runs out");
                        return Written::GaveUp;
                    }
                }
                crate::bus::backoff(wait).await;
            }
        }
    }
}
