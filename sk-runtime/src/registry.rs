//! Jobs registered at link time through `inventory`, and what the generated handlers use.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::error::{Error, JobError, Result};
use crate::job::{Data, JobContext, JobOptions, JobOutcome, Requirement};

/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = JobOutcome> + Send>>;
/// A handler's result: the payload and injected arguments are resolved before the future
/// is built, so a bad payload is an error here and never a panic.
pub type HandlerResult = Result<HandlerFuture, JobError>;

/// One `#[job]` fn, submitted to `inventory` by the generated code.
#[derive(Debug)]
pub struct Registration {
    /// The stable task type.
    pub task_type: &'static str,
    /// Defaults from the attribute.
    pub options: JobOptions,
    /// A normalized cron expression (6 or 7 fields, after `CRON_TZ=<zone> ` for a
    /// `timezone`) for scheduled jobs.
    pub schedule: Option<&'static str>,
    /// For scheduled jobs: whether a tick may start while the last one still runs.
    pub overlap: bool,
    /// For scheduled jobs: whether the latest tick missed before the worker started runs.
    pub run_missed: bool,
    /// `#[job(rate = "100/1m")]`: at most this many starts per window over every
    /// worker, as (count, window).
    pub rate: Option<(u32, std::time::Duration)>,
    /// For `every = "..."` jobs: the time from the end of one run to the start of the
    /// next, or from when one was due to when the next is (`every_after_due`).
    pub every: Option<std::time::Duration>,
    /// `after = "due"`: the period runs from when the last run was due (a fixed rate).
    pub every_after_due: bool,
    /// Builds the job's future from a claimed row.
    pub handler: fn(HandlerInput) -> HandlerResult,
    /// The fn takes a transaction: a success returned by `handler` is already committed
    /// with its completion.
    pub transaction: bool,
    /// Checks that a JSON payload deserializes into the job's arguments; the tenant
    /// they give the job (`#[job(tenant = arg)]`), if any.
    pub validate: fn(&str) -> std::result::Result<Option<String>, String>,
    /// `#[job(tenant = arg)]`: the argument whose value is the job's tenant.
    pub tenant_from: Option<&'static str>,
    /// The JSON Schema of the job's arguments (`sk_runtime::schema`).
    pub args_schema: fn(&mut schemars::SchemaGenerator) -> serde_json::Value,
    /// The `Data<T>` types the fn takes.
    pub requirements: fn() -> Vec<Requirement>,
    /// Where the fn is defined, for the duplicate-name error.
    pub file: &'static str,
    /// The line of the fn.
    pub line: u32,
}

inventory::collect!(Registration);

/// Whether `payload` deserializes into job `J`, and then the tenant its arguments give it
/// ([`Job::tenant`](crate::Job::tenant)) (`Registration::validate`).
///
/// # Errors
/// Why it does not.
pub fn validate<J: crate::job::Job>(payload: &str) -> std::result::Result<Option<String>, String> {
    serde_json::from_str::<J>(payload)
        .map(|job| job.tenant())
        .map_err(|e| e.to_string())
}

/// The registration of task type `name` linked into this binary.
pub(crate) fn find(name: &str) -> Option<&'static Registration> {
    inventory::iter::<Registration>
        .into_iter()
        .find(|r| r.task_type == name)
}

/// The task types linked into this binary, sorted.
pub(crate) fn names() -> Vec<&'static str> {
    let mut names: Vec<_> = inventory::iter::<Registration>
        .into_iter()
        .map(|r| r.task_type)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Everything a handler gets: the raw payload, the context and the shared data.
pub struct HandlerInput {
    pub(crate) payload: Option<String>,
    pub(crate) ctx: JobContext,
    pub(crate) data: Arc<DataMap>,
    /// Where a job that takes a transaction gets it; `None` without a database (a unit
    /// test's runner without a pool).
    pub(crate) transaction: Option<crate::transaction::TxSource>,
    /// The outputs of the jobs it waited on, in order; `None` if it waited on none.
    pub(crate) inputs: Option<Vec<Option<String>>>,
}

impl HandlerInput {
    /// Where the job's transaction comes from.
    ///
    /// # Errors
    /// There is no database: a test runner without a pool.
    pub fn transaction(&self) -> Result<crate::transaction::TxSource, JobError> {
        self.transaction.clone().ok_or_else(|| {
            JobError::fatal(format!(
                "`{}` takes a transaction, and this run has no database: give the test runner a pool (testing::Runner::pool)",
                self.ctx.task_type
            ))
            .with_kind("transaction")
        })
    }

    /// Deserializes the payload; a failure (or a NULL payload) is a fatal error naming the
    /// reason.
    ///
    /// # Errors
    /// The payload does not match the job type.
    pub fn decode<J: DeserializeOwned>(&self) -> Result<J, JobError> {
        let Some(payload) = &self.payload else {
            return Err(JobError::fatal(format!(
                "payload of `{}` is NULL; it must be the job's JSON",
                self.ctx.task_type
            ))
            .with_kind("payload"));
        };
        serde_json::from_str(payload).map_err(|e| JobError::payload(&self.ctx.task_type, &e))
    }
}

/// An argument the worker provides instead of the payload.
pub trait Inject: Sized {
    /// Produces the argument for one run.
    ///
    /// # Errors
    /// The worker does not have what the argument needs.
    fn inject(input: &HandlerInput) -> Result<Self, JobError>;
    /// What must be registered on the worker for [`Inject::inject`] to succeed.
    fn requirement() -> Option<Requirement>;
}

impl Inject for JobContext {
    fn inject(input: &HandlerInput) -> Result<Self, JobError> {
        Ok(input.ctx.clone())
    }
    fn requirement() -> Option<Requirement> {
        None
    }
}

impl<T: Send + Sync + 'static> Inject for Data<T> {
    fn inject(input: &HandlerInput) -> Result<Self, JobError> {
        input
            .data
            .0
            .get(&TypeId::of::<T>())
            .cloned()
            .and_then(Data::downcast)
            .ok_or_else(|| {
                JobError::new(format!(
                    "no Data<{}> registered on the worker",
                    std::any::type_name::<T>()
                ))
            })
    }
    fn requirement() -> Option<Requirement> {
        Some(Requirement {
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
            backend: None,
        })
    }
}

/// The most bytes of JSON a job's output is stored with.
pub(crate) const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// What a job fn may return: `()` or `Result<T, E>` with `T: Serialize` (stored as the
/// job's output, up to 1 MiB of JSON: a larger one is not stored, with a warning in the
/// log, nor is one that does not serialize; `()` stores nothing) and `E: Into<JobError>` (every `std::error::Error`);
/// `#[job]` also takes an error that is only `Display + Debug`, such as `anyhow::Error` or
/// `Box<dyn Error + Send + Sync>` ([`ResultTag`]).
#[diagnostic::on_unimplemented(
    message = "a #[job] fn returns `()` or `Result<T, E>` (T: Serialize, E: an error), not `{Self}`",
    label = "not a job's return type"
)]
pub trait IntoJobResult {
    /// Converts the fn's output.
    ///
    /// # Errors
    /// The fn returned an error.
    fn into_job_result(self) -> JobOutcome;
}

/// The success type of a job fn's return type: `T` of `Result<T, E>`, `()` of `()`
/// ([`Job::Output`](crate::Job::Output)).
#[diagnostic::on_unimplemented(
    message = "a #[job] fn returns `()` or `Result<T, E>` (T: Serialize, E: an error), not `{Self}`",
    label = "not a job's return type"
)]
pub trait JobReturn {
    /// The success type.
    type Ok;
}

impl JobReturn for () {
    type Ok = ();
}

impl<T, E> JobReturn for Result<T, E> {
    type Ok = T;
}

impl IntoJobResult for () {
    fn into_job_result(self) -> JobOutcome {
        Ok(None)
    }
}

impl<T: serde::Serialize, E: Into<JobError>> IntoJobResult for Result<T, E> {
    fn into_job_result(self) -> JobOutcome {
        let value = self.map_err(Into::into)?;
        match serde_json::to_string(&value) {
            Ok(json) if json == "null" => Ok(None),
            Ok(json) if json.len() > MAX_OUTPUT_BYTES => {
                tracing::warn!(
                    "sk: the job succeeded, but its output is {} bytes of JSON, over the limit of {MAX_OUTPUT_BYTES}; recorded without it (store large results elsewhere and return a reference)",
                    json.len()
                );
                Ok(None)
            }
            Ok(json) => Ok(Some(json)),
            // The work is done: running it again would repeat it. Record the success.
            Err(e) => {
                tracing::warn!("sk: the job succeeded, but its output does not serialize ({e}); recorded without it");
                Ok(None)
            }
        }
    }
}

/// Picks how `#[job]` turns a fn's output into a job outcome, by autoref: through
/// [`IntoJobResult`] where it applies, else, for `Result<T, E>` with an error that is only
/// `Display + Debug` (`anyhow::Error`, `Box<dyn Error + Send + Sync>`), through its
/// text: the message is its `Display`, the detail its `Debug` (anyhow's carries the
/// causes), the kind its type name.
pub struct ResultTag<O>(std::marker::PhantomData<fn(O)>);

impl<O> ResultTag<O> {
    /// The tag of output type `O`.
    pub fn new() -> Self {
        ResultTag(std::marker::PhantomData)
    }
}

impl<O> Default for ResultTag<O> {
    fn default() -> Self {
        Self::new()
    }
}

/// The first choice of [`ResultTag`]: [`IntoJobResult`].
pub trait ViaIntoJobResult<O> {
    /// The conversion.
    fn converter(self) -> fn(O) -> JobOutcome;
}

// By value (`self`, not `&self`): method lookup tries the receiver `&&ResultTag` as it is
// before it dereferences it to `&ResultTag`, so this impl wins whenever it applies.
impl<O: IntoJobResult> ViaIntoJobResult<O> for &&ResultTag<O> {
    fn converter(self) -> fn(O) -> JobOutcome {
        O::into_job_result
    }
}

/// The second choice of [`ResultTag`]: an error by its text.
pub trait ViaDisplay<O> {
    /// The conversion.
    fn converter(self) -> fn(O) -> JobOutcome;
}

impl<T, E> ViaDisplay<Result<T, E>> for &ResultTag<Result<T, E>>
where
    T: serde::Serialize,
    E: std::fmt::Display + std::fmt::Debug,
{
    fn converter(self) -> fn(Result<T, E>) -> JobOutcome {
        |output| {
            let output = output.map_err(|e| {
                let mut error = JobError::new(e.to_string());
                error.kind = std::any::type_name::<E>().to_owned();
                let detail = format!("{e:?}");
                if detail != error.message {
                    error.detail = Some(detail);
                }
                error
            });
            output.into_job_result()
        }
    }
}

/// Shared data by type.
#[derive(Default)]
pub(crate) struct DataMap(pub(crate) HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl DataMap {
    /// Adds `value` as the `Data<T>` of jobs (replacing an earlier `T`).
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }
}

/// The handlers this worker runs, by task type.
pub(crate) struct Registry {
    pub(crate) jobs: HashMap<&'static str, &'static Registration>,
}

impl Registry {
    /// Collects every linked `#[job]`, optionally restricted to `only`; fails on
    /// duplicate names and on missing data.
    pub(crate) fn collect(
        only: Option<&[String]>,
        data: &DataMap,
        backend: &'static str,
    ) -> Result<Self> {
        let mut jobs: HashMap<&'static str, &'static Registration> = HashMap::new();
        for reg in inventory::iter::<Registration> {
            if only.is_some_and(|only| !only.iter().any(|t| t == reg.task_type)) {
                continue;
            }
            if let Some(first) = jobs.get(reg.task_type) {
                let (a, b) = order(first, reg);
                return Err(Error::DuplicateTaskType {
                    task_type: reg.task_type.to_owned(),
                    first: format!("{}:{}", a.file, a.line),
                    second: format!("{}:{}", b.file, b.line),
                });
            }
            jobs.insert(reg.task_type, reg);
        }
        let mut sorted: Vec<&Registration> = jobs.values().copied().collect();
        sorted.sort_by_key(|r| r.task_type);
        for reg in sorted {
            for req in (reg.requirements)() {
                if let Some(needed) = req.backend {
                    if needed != backend {
                        return Err(Error::invalid(
                            "transaction",
                            format!(
                                "job `{}` takes a {needed} transaction, but this worker runs on {backend}",
                                reg.task_type
                            ),
                        ));
                    }
                } else if !data.0.contains_key(&req.type_id) {
                    return Err(Error::MissingData {
                        task_type: reg.task_type,
                        type_name: req.type_name,
                    });
                }
            }
        }
        if let Some(only) = only {
            if let Some(missing) = only.iter().find(|t| !jobs.contains_key(t.as_str())) {
                return Err(Error::invalid(
                    "task type",
                    format!("`{missing}` was asked for but no #[job] with that name is linked into this binary"),
                ));
            }
        }
        Ok(Registry { jobs })
    }

    pub(crate) fn task_types(&self) -> Vec<String> {
        let mut types: Vec<String> = self.jobs.keys().map(|t| (*t).to_owned()).collect();
        types.sort();
        types
    }
}

/// Orders two registrations by location so the error message is stable.
pub(crate) fn order<'a>(
    a: &'a Registration,
    b: &'a Registration,
) -> (&'a Registration, &'a Registration) {
    if (a.file, a.line) <= (b.file, b.line) {
        (a, b)
    } else {
        (b, a)
    }
}
