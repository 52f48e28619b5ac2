//! Layers around a job's run: code of the application's that every run of a worker's
//! jobs (or of one job type's) passes through, seeing the job's context and its outcome,
//! as Sidekiq's server middleware and tower's layers do.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::FutureExt;

use crate::job::{JobContext, JobOutcome};

/// The future a [`Layer`] returns: the run's outcome.
pub type LayerFuture<'a> = Pin<Box<dyn Future<Output = JobOutcome> + Send + 'a>>;

/// Code around every run of a job, installed on a worker for all its jobs
/// ([`WorkerBuilder::layer`](crate::WorkerBuilder::layer)) or for one job type
/// ([`WorkerBuilder::layer_for`](crate::WorkerBuilder::layer_for)), and on the testing
/// kit's [`Runner`](crate::testing::Runner).
///
/// A layer runs the rest of the stack and the handler with [`Next::run`], and returns
/// the run's outcome: that one, or another. Returning without calling it refuses the
/// run (a [`JobError`](crate::JobError), whose retry rules apply as to the handler's) or
/// delays it ([`JobError::snooze`](crate::JobError::snooze), no attempt used). The
/// worker's layers run outermost, in the order given, then the job type's. A layer's
/// panic is the run's failure, as a handler's is; the run's time limit covers the
/// handler only.
///
/// A job that takes a transaction commits its success with its writes inside
/// `next.run()`: a layer cannot undo it (a failure returned over a committed success is
/// logged and the success kept), but a success returned over the handler's failure is
/// recorded as any success, without the handler's writes, which rolled back.
///
/// ```
/// use std::time::Instant;
/// use sk_runtime::{JobContext, JobError, Layer, LayerFuture, Next};
///
/// /// Logs each run's time, and refuses the jobs of a tenant that is switched off.
/// struct Guard;
///
/// impl Layer for Guard {
///     fn around<'a>(&'a self, ctx: &'a JobContext, next: Next<'a>) -> LayerFuture<'a> {
///         Box::pin(async move {
///             if ctx.tenant() == Some("suspended") {
///                 return Err(JobError::fatal("the tenant is suspended"));
///             }
///             let started = Instant::now();
///             let outcome = next.run().await;
///             tracing::info!(job = %ctx.id(), took = ?started.elapsed(), ok = outcome.is_ok());
///             outcome
///         })
///     }
/// }
/// ```
pub trait Layer: Send + Sync + 'static {
    /// Runs the job through `next`, or not, and returns the run's outcome.
    fn around<'a>(&'a self, ctx: &'a JobContext, next: Next<'a>) -> LayerFuture<'a>;
}

/// The rest of a run: the layers after this one, then the handler.
pub struct Next<'a> {
    rest: &'a [Arc<dyn Layer>],
    ctx: &'a JobContext,
    handler: LayerFuture<'a>,
}

impl std::fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("layers", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl Next<'_> {
    /// Runs the rest of the stack and the handler; their outcome.
    pub async fn run(self) -> JobOutcome {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                let next = Next {
                    rest,
                    ctx: self.ctx,
                    handler: self.handler,
                };
                layer.around(self.ctx, next).await
            }
            None => self.handler.await,
        }
    }
}

/// A worker's layers: its own, and each job type's after them.
#[derive(Default, Clone)]
pub(crate) struct Layers {
    all: Vec<Arc<dyn Layer>>,
    by_type: Vec<(String, Arc<dyn Layer>)>,
}

impl std::fmt::Debug for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layers")
            .field("all", &self.all.len())
            .field("by_type", &self.by_type.len())
            .finish()
    }
}

/// The layers one job type's runs pass through, outermost first; empty for none.
pub(crate) type Stack = Arc<[Arc<dyn Layer>]>;

impl Layers {
    pub(crate) fn push(&mut self, layer: Arc<dyn Layer>) {
        self.all.push(layer);
    }

    pub(crate) fn push_for(&mut self, task_type: &str, layer: Arc<dyn Layer>) {
        self.by_type.push((task_type.to_owned(), layer));
    }

    /// The job types given layers of their own.
    pub(crate) fn typed(&self) -> impl Iterator<Item = &str> {
        self.by_type.iter().map(|(t, _)| t.as_str())
    }

    /// The stack of `task_type`'s runs.
    pub(crate) fn stack(&self, task_type: &str) -> Stack {
        self.all
            .iter()
            .chain(
                self.by_type
                    .iter()
                    .filter(|(t, _)| t == task_type)
                    .map(|(_, l)| l),
            )
            .cloned()
            .collect()
    }
}

/// `handler` run through `stack` with `ctx`; a layer's panic is the run's failure (the
/// handler's own is caught inside it already).
pub(crate) async fn run(stack: &Stack, ctx: &JobContext, handler: LayerFuture<'_>) -> JobOutcome {
    let next = Next {
        rest: stack,
        ctx,
        handler,
    };
    AssertUnwindSafe(next.run())
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(crate::error::panic_error(&*panic)))
}
