//! The worker's local queue: claimed jobs waiting for a handler slot, in the order they
//! start.

use tokio::sync::OwnedSemaphorePermit;

use crate::store::ClaimedJob;

/// Claimed jobs waiting for a handler slot, taken by priority, then turn, then post
/// time, then claim order. (A claim returns its rows in no particular order, and a later
/// claim may bring a more urgent job than those waiting.) The jobs of a fair queue
/// (`WorkerBuilder::fair`) take turns by tenant: each tenant's next job waits for the
/// turn after its last one's, so a tenant's jobs of a later claim start beside those of
/// a tenant whose earlier claims' jobs still wait, not behind them all. Every other job
/// waits for the current turn: with no fair queue, the turn stays 0.
#[derive(Default)]
pub(crate) struct LocalQueue {
    jobs: std::collections::BinaryHeap<Waiting>,
    claimed: u64,
    /// The turn of the last job taken.
    turn: u64,
    /// Per tenant of a fair queue, the turn of its next job.
    turns: std::collections::HashMap<String, u64>,
}

impl LocalQueue {
    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub(super) fn push(
        &mut self,
        job: ClaimedJob,
        queue: Option<OwnedSemaphorePermit>,
        fair: bool,
    ) {
        self.claimed += 1;
        let turn = match job.task_tenant.as_ref().filter(|_| fair) {
            Some(tenant) => {
                if self.turns.len() > 4 * self.jobs.len() + 64 {
                    // Tenants whose turn has come are as if new.
                    let now = self.turn;
                    self.turns.retain(|_, next| *next > now);
                }
                let next = self.turns.entry(tenant.clone()).or_default();
                let turn = (*next).max(self.turn);
                *next = turn + 1;
                turn
            }
            None => self.turn,
        };
        self.jobs.push(Waiting {
            priority: job.task_priority,
            turn,
            posted_at: job.task_posted_at_ts,
            seq: self.claimed,
            job: Box::new(job),
            queue,
        });
    }

    /// Every waiting job, in no order, leaving none.
    pub(super) fn take_all(&mut self) -> Vec<Waiting> {
        std::mem::take(&mut self.jobs).into_vec()
    }

    pub(super) fn pop(&mut self) -> Option<Waiting> {
        let next = self.jobs.pop()?;
        self.turn = self.turn.max(next.turn);
        Some(next)
    }
}

/// A claimed job waiting in the local queue: its order's key beside it, the job boxed,
/// so the heap moves a few words, and the job's task gets the box as it is.
pub(super) struct Waiting {
    priority: i32,
    turn: u64,
    posted_at: chrono::DateTime<chrono::Utc>,
    seq: u64,
    pub(super) job: Box<ClaimedJob>,
    /// Its queue's slot, for a queue limited in this worker (taken at claim).
    pub(super) queue: Option<OwnedSemaphorePermit>,
}

impl Waiting {
    /// The heap's greatest goes first: the lowest priority number, earliest turn,
    /// earliest post, first claimed.
    fn key(&self) -> impl Ord {
        std::cmp::Reverse((self.priority, self.turn, self.posted_at, self.seq))
    }
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}

impl Eq for Waiting {}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tenant: Option<&str>, priority: i32, posted: i64) -> ClaimedJob {
        let mut job = ClaimedJob::unreadable(uuid::Uuid::nil(), "t".into(), 1, String::new());
        job.task_tenant = tenant.map(str::to_owned);
        job.task_priority = priority;
        job.task_posted_at_ts = chrono::DateTime::from_timestamp(posted, 0).unwrap();
        job
    }

    fn order(queue: &mut LocalQueue) -> Vec<(Option<String>, i32)> {
        std::iter::from_fn(|| queue.pop())
            .map(|w| (w.job.task_tenant.clone(), w.job.task_priority))
            .collect()
    }

    #[test]
    fn a_fair_queues_tenants_take_turns_and_priority_still_leads() {
        let mut queue = LocalQueue::default();
        for n in 0..4 {
            queue.push(job(Some("a"), 0, n), None, true);
        }
        // b's jobs were posted after all of a's, and come in a later claim.
        queue.push(job(Some("b"), 0, 10), None, true);
        queue.push(job(Some("b"), 0, 11), None, true);
        queue.push(job(Some("a"), -1, 12), None, true);
        let tenants: Vec<_> = order(&mut queue)
            .into_iter()
            .map(|(t, p)| (t.unwrap(), p))
            .collect();
        let names: Vec<(&str, i32)> = tenants.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        assert_eq!(
            names,
            [
                ("a", -1),
                ("a", 0),
                ("b", 0),
                ("a", 0),
                ("b", 0),
                ("a", 0),
                ("a", 0)
            ]
        );
    }

    #[test]
    fn without_a_fair_queue_jobs_go_by_priority_then_post_time() {
        let mut queue = LocalQueue::default();
        queue.push(job(Some("a"), 0, 5), None, false);
        queue.push(job(None, 0, 1), None, false);
        queue.push(job(Some("b"), -2, 9), None, false);
        let order: Vec<(Option<String>, i32)> = order(&mut queue);
        assert_eq!(
            order,
            [(Some("b".into()), -2), (None, 0), (Some("a".into()), 0)]
        );
    }
}
