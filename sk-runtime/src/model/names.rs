//! What a name sk stores (a queue, a task type, a tenant, a schedule) may be.

use crate::error::{Error, Result};

/// The longest queue name, source or unique key accepted (the columns' width).
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// Queue names, sources and keys are stored as data (always bound, never spliced into
/// SQL); this only keeps them within the columns and readable.
pub(crate) fn check_name(what: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(
            what,
            format!(
                "is {} bytes long, over the limit of {MAX_NAME_BYTES}",
                value.len()
            ),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(what, "must not contain a NUL byte"));
    }
    Ok(())
}
