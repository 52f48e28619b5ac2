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
    if let Some(c) = value.chars().find(|&c| c.is_control() || invisible(c)) {
        return Err(Error::invalid(
            what,
            format!(
                "{value:?} holds {}, which a name may not",
                c.escape_unicode()
            ),
        ));
    }
    if value.trim() != value {
        return Err(Error::invalid(
            what,
            format!("{value:?} begins or ends with white space"),
        ));
    }
    Ok(())
}

/// A character that changes how the text around it shows without showing itself: the
/// bidirectional controls (U+202E turned `gpj.exe` into `exe.jpg` on the page), zero
/// width ones, the BOM. A queue named with one looks like another in the dashboard.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn a_name_is_plain_visible_text() {
        for good in ["mail", "a queue", "café", "tenant-42/eu"] {
            assert!(check_name("queue name", good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("", "must not be empty"),
            (" ", "white space"),
            ("mail\n", "\\u{a}"),
            ("\u{1}", "\\u{1}"),
            ("a\u{202E}b", "\\u{202e}"),
            (" mail", "white space"),
        ] {
            let refused = check_name("queue name", bad).unwrap_err().to_string();
            assert!(refused.contains(why), "{bad:?}: {refused}");
        }
    }
}
