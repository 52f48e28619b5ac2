//! Seed 002's per-job fields that sk keeps in the job's metadata (the seed's `jobs_data`,
//! which sk's `task_metadata` stands for): a retry group, an external string id and an
//! application-defined sub-state. Each is a metadata key of that name, indexed where a
//! lookup needs it (migrations), and read back by the accessors of [`JobRecord`]. The keys:
//! `retry_group`, `external_id`, `sub_state` (`JobFilter::seed_002` lists them).

use super::JobRecord;
use crate::error::{Error, Result};

/// The longest retry group and external id, in characters: seed 002's `varchar(40)`.
pub(crate) const SEED_002_ID_CHARS: usize = 40;

/// The longest sub-state, in characters.
pub(crate) const SUB_STATE_CHARS: usize = 64;

/// `key` as the `'static` name of a seed-002 field, if it is one: safe to write into a
/// statement, as these names are sk's own.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn seed_002_key(key: &str) -> Option<&'static str> {
    ["retry_group", "external_id", "sub_state"]
        .into_iter()
        .find(|k| *k == key)
}

/// Checks a seed-002 value: not empty, at most `max` characters, no NUL.
pub(crate) fn check(what: &'static str, value: &str, max: usize) -> Result<()> {
    let chars = value.chars().count();
    if chars == 0 {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if chars > max {
        return Err(Error::invalid(
            what,
            format!("is {chars} characters long, over the limit of {max} (seed 002's column)"),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(what, "must not contain a NUL character"));
    }
    Ok(())
}

impl JobRecord {
    /// The value under metadata `key`, if the metadata is an object holding one there.
    fn metadata_value(&self, key: &str) -> Option<serde_json::Value> {
        let metadata: serde_json::Value = serde_json::from_str(self.metadata.as_deref()?).ok()?;
        metadata.get(key).cloned()
    }

    /// The text under metadata `key`, if the metadata is an object holding a string there.
    fn metadata_text(&self, key: &str) -> Option<String> {
        self.metadata_value(key)?.as_str().map(str::to_owned)
    }

    /// Its retry group (seed 002), given at enqueue.
    pub fn retry_group(&self) -> Option<String> {
        self.metadata_text("retry_group")
    }

    /// Its external id (seed 002's string id), given at enqueue.
    pub fn external_id(&self) -> Option<String> {
        self.metadata_text("external_id")
    }

    /// The sub-state its handler set last (seed 002), kept after it ends.
    pub fn sub_state(&self) -> Option<String> {
        self.metadata_text("sub_state")
    }

    /// How far its handler said it had come, last written
    /// ([`JobContext::progress`](crate::JobContext::progress)), kept after it ends.
    pub fn progress(&self) -> Option<serde_json::Value> {
        self.metadata_value("progress")
    }

    /// The outputs of its steps that succeeded, by name
    /// ([`JobContext::step`](crate::JobContext::step)): what a retry skips.
    pub fn steps(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        match self.metadata_value("steps")? {
            serde_json::Value::Object(steps) => Some(steps),
            _ => None,
        }
    }
}

/// What [`Client::update`](crate::Client::update) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpdateOutcome {
    /// The waiting job has the changes; its version is now this.
    Updated {
        /// The job's new version.
        version: i32,
    },
    /// The job's version is not the one given: another change came first. Nothing
    /// changed; read the job again and decide.
    VersionChanged {
        /// The job's version now.
        version: i32,
    },
    /// A worker is running the job; nothing changed.
    Running,
    /// No waiting job has this id: it has ended, or never was.
    NotWaiting,
}
