//! Stage one: the attribute's `key = value` list into a typed [`JobArgs`].

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, ExprUnary, Lit, LitStr, Meta, Token, UnOp};

const KEYS: &str =
    "name, queue, priority, max_attempts, backoff, backoff_base, backoff_max, timeout, schedule, timezone, overlap, missed, every, after, rate, tenant, encrypted";
const MAX_NAME_LEN: usize = 255;

/// How the delay before a retry grows.
pub(crate) enum BackoffArg {
    Exponential,
    Linear,
    Constant,
    /// A path to the user's `fn(u32) -> Duration`.
    Custom(ExprPath),
}

/// The parsed and validated attribute.
#[derive(Default)]
pub(crate) struct JobArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) queue: Option<LitStr>,
    pub(crate) priority: Option<i32>,
    pub(crate) max_attempts: Option<i32>,
    pub(crate) backoff: Option<BackoffArg>,
    pub(crate) backoff_base: Option<Duration>,
    pub(crate) backoff_max: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    /// The normalized expression and the literal it came from, for spans.
    pub(crate) schedule: Option<(String, LitStr)>,
    /// A fixed period between the end of one run and the start of the next, and where
    /// it was written.
    pub(crate) every: Option<(Duration, Span)>,
    /// For `every`: whether the period runs from the last run's due time (`after = "due"`,
    /// a fixed rate) instead of its end (`"end"`, the default), and where it was said.
    pub(crate) after_due: Option<(bool, Span)>,
    /// Whether a cron tick may start while the last one still runs, and where it was said.
    pub(crate) overlap: Option<(bool, Span)>,
    /// Whether the latest tick missed while no worker ran is run at start.
    pub(crate) run_missed: Option<(bool, Span)>,
    /// The IANA time zone of `schedule` (checked by the worker, which has the zone
    /// database), and where it was written.
    pub(crate) timezone: Option<(String, Span)>,
    /// At most this many starts of the job type per window, over every worker.
    pub(crate) rate: Option<(u32, Duration)>,
    /// The payload argument the job's tenant is derived from (checked against the fn's
    /// arguments by `expand`).
    pub(crate) tenant: Option<syn::Ident>,
    /// `encrypted`: the payload is stored sealed.
    pub(crate) encrypted: bool,
}

/// Collects errors so that every mistake is reported at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        self.0.map_or(Ok(()), Err)
    }
}

impl JobArgs {
    /// Parses the attribute tokens; every problem is recorded in `errors`.
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Self {
        let mut args = JobArgs::default();
        let metas = match syn::parse::Parser::parse2(
            Punctuated::<Meta, Token![,]>::parse_terminated,
            tokens,
        ) {
            Ok(metas) => metas,
            Err(error) => {
                errors.push(error);
                return args;
            }
        };
        let mut seen: Vec<String> = Vec::new();
        for meta in metas {
            let nv = match meta {
                Meta::NameValue(nv) => nv,
                Meta::Path(path) if path.is_ident("encrypted") => {
                    if args.encrypted {
                        errors.at(path.span(), "duplicate #[job] key `encrypted`");
                    }
                    args.encrypted = true;
                    continue;
                }
                other => {
                    errors.at(
                        other.span(),
                        format!("expected `key = value` in #[job(...)]; valid keys are: {KEYS}"),
                    );
                    continue;
                }
            };
            let Some(key) = nv.path.get_ident().map(ToString::to_string) else {
                errors.at(
                    nv.path.span(),
                    format!("unknown #[job] key; valid keys are: {KEYS}"),
                );
                continue;
            };
            if seen.contains(&key) {
                errors.at(nv.path.span(), format!("duplicate #[job] key `{key}`"));
                continue;
            }
            seen.push(key.clone());
            args.set(&key, &nv.path, &nv.value, errors);
        }
        args
    }

    fn set(&mut self, key: &str, path: &syn::Path, value: &Expr, errors: &mut Errors) {
        match key {
            "name" | "queue" => {
                if let Some(lit) = string(key, value, errors) {
                    check_name(key, &lit, errors);
                    if key == "name" {
                        self.name = Some(lit);
                    } else {
                        self.queue = Some(lit);
                    }
                }
            }
            "priority" => self.priority = integer(key, value, i32::MIN, errors),
            "max_attempts" => self.max_attempts = integer(key, value, 1, errors),
            "backoff" => self.backoff = backoff(value, errors),
            "backoff_base" => self.backoff_base = duration(key, value, errors),
            "backoff_max" => self.backoff_max = duration(key, value, errors),
            "timeout" => {
                self.timeout = duration(key, value, errors);
                if self.timeout == Some(Duration::ZERO) {
                    errors.at(value.span(), "`timeout` must be longer than zero");
                }
            }
            "overlap" => match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => self.overlap = Some((b.value, b.span())),
                other => errors.at(
                    other.span(),
                    "`overlap` expects `true` or `false`, like `overlap = true`",
                ),
            },
            "missed" => {
                if let Some(lit) = string(key, value, errors) {
                    match lit.value().as_str() {
                        "skip" => self.run_missed = Some((false, lit.span())),
                        "run_once" => self.run_missed = Some((true, lit.span())),
                        other => errors.at(
                            lit.span(),
                            format!("`missed` is \"skip\" or \"run_once\", not {other:?}"),
                        ),
                    }
                }
            }
            "after" => {
                if let Some(lit) = string(key, value, errors) {
                    match lit.value().as_str() {
                        "due" => self.after_due = Some((true, lit.span())),
                        "end" => self.after_due = Some((false, lit.span())),
                        other => errors.at(
                            lit.span(),
                            format!("`after` is \"due\" (the period runs from when the last run was due: a fixed rate) or \"end\" (from when it ended), not {other:?}"),
                        ),
                    }
                }
            }
            "timezone" => {
                if let Some(lit) = string(key, value, errors) {
                    let zone = lit.value();
                    if zone.is_empty() || zone.contains(char::is_whitespace) {
                        errors.at(
                            lit.span(),
                            format!("`timezone` is an IANA zone name such as \"Europe/Paris\", not {zone:?}"),
                        );
                    } else {
                        self.timezone = Some((zone, lit.span()));
                    }
                }
            }
            "rate" => {
                if let Some(lit) = string(key, value, errors) {
                    match rate(&lit.value()) {
                        Ok(rate) => self.rate = Some(rate),
                        Err(why) => errors.at(
                            lit.span(),
                            format!("`rate` {why}; write it as starts/window, like \"100/1m\", \"50/1s\" or \"3/h\""),
                        ),
                    }
                }
            }
            "tenant" => match value {
                Expr::Path(ExprPath { path, qself: None, .. }) if path.get_ident().is_some() => {
                    self.tenant = path.get_ident().cloned();
                }
                other => errors.at(
                    other.span(),
                    "`tenant` names one of the fn's arguments, like `tenant = account_id`: the job's tenant is that argument's value",
                ),
            },
            "every" => {
                let every = duration(key, value, errors);
                if every == Some(Duration::ZERO) {
                    errors.at(value.span(), "`every` must be longer than zero");
                }
                self.every = every.map(|d| (d, value.span()));
            }
            "schedule" => {
                if let Some(lit) = string(key, value, errors) {
                    match normalize_cron(&lit.value()) {
                        Ok(expr) => self.schedule = Some((expr, lit)),
                        Err(reason) => errors.at(
                            lit.span(),
                            format!("`schedule` is not a valid cron expression: {reason}"),
                        ),
                    }
                }
            }
            "encrypted" => errors.at(
                path.span(),
                "`encrypted` takes no value: write `#[job(encrypted)]`",
            ),
            _ => errors.at(
                path.span(),
                format!("unknown #[job] key `{key}`; valid keys are: {KEYS}"),
            ),
        }
    }
}

fn string(key: &str, value: &Expr, errors: &mut Errors) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit.clone()),
        other => {
            errors.at(
                other.span(),
                format!("`{key}` expects a string literal, like `{key} = \"...\"`"),
            );
            None
        }
    }
}

fn check_name(key: &str, lit: &LitStr, errors: &mut Errors) {
    let value = lit.value();
    if value.trim().is_empty() {
        errors.at(lit.span(), format!("`{key}` must not be empty"));
    } else if value.len() > MAX_NAME_LEN {
        errors.at(
            lit.span(),
            format!("`{key}` must be at most {MAX_NAME_LEN} bytes long"),
        );
    }
}

fn integer(key: &str, value: &Expr, min: i32, errors: &mut Errors) -> Option<i32> {
    let (negative, lit) = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => (false, lit),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match &**expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => (true, lit),
            other => {
                errors.at(other.span(), format!("`{key}` expects an integer literal"));
                return None;
            }
        },
        other => {
            errors.at(
                other.span(),
                format!("`{key}` expects an integer literal, like `{key} = 3`"),
            );
            return None;
        }
    };
    let parsed = lit
        .base10_parse::<i64>()
        .ok()
        .map(|v| if negative { -v } else { v })
        .and_then(|v| i32::try_from(v).ok());
    match parsed {
        Some(v) if v >= min => Some(v),
        _ => {
            errors.at(
                value.span(),
                format!("`{key}` must be an integer from {min} to {}", i32::MAX),
            );
            None
        }
    }
}

/// A rate as `RateLimit`'s `FromStr` reads it: a count from 1 to `i32::MAX`, a slash and
/// a window from 1 ms to 7 days (a unit alone is one of it).
fn rate(text: &str) -> Result<(u32, Duration), String> {
    let (count, window) = text.split_once('/').ok_or("has no slash")?;
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|n| *n >= 1 && i32::try_from(*n).is_ok())
        .ok_or("has a count that is not a whole number from 1 to 2147483647")?;
    let window = window.trim();
    let window = if window.starts_with(|c: char| c.is_ascii_digit()) {
        humantime::parse_duration(window)
    } else {
        humantime::parse_duration(&format!("1{window}"))
    }
    .map_err(|e| format!("has a window that is not a duration ({e})"))?;
    if window < Duration::from_millis(1) || window > Duration::from_secs(7 * 24 * 3600) {
        return Err("has a window outside 1ms to 7days".to_owned());
    }
    Ok((count, window))
}

fn duration(key: &str, value: &Expr, errors: &mut Errors) -> Option<Duration> {
    let lit = string(key, value, errors)?;
    match humantime::parse_duration(&lit.value()) {
        Ok(d) => Some(d),
        Err(e) => {
            errors.at(
                lit.span(),
                format!(
                    "`{key}` is not a duration ({e}); write it like \"30s\", \"5m\" or \"1h 30m\""
                ),
            );
            None
        }
    }
}

fn backoff(value: &Expr, errors: &mut Errors) -> Option<BackoffArg> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => match lit.value().as_str() {
            "exponential" => Some(BackoffArg::Exponential),
            "linear" => Some(BackoffArg::Linear),
            "constant" => Some(BackoffArg::Constant),
            other => {
                errors.at(
                    lit.span(),
                    format!(
                        "unknown `backoff` \"{other}\"; expected \"exponential\", \"linear\", \"constant\" or a path to a `fn(u32) -> Duration`"
                    ),
                );
                None
            }
        },
        Expr::Path(path) => Some(BackoffArg::Custom(path.clone())),
        other => {
            errors.at(
                other.span(),
                "`backoff` expects \"exponential\", \"linear\", \"constant\" or a path to a `fn(u32) -> Duration`",
            );
            None
        }
    }
}

/// Accepts 5-field (minute precision), 6-field (with seconds) and 7-field (with years)
/// cron expressions and returns the 6/7-field form the runtime parses.
fn normalize_cron(expr: &str) -> Result<String, String> {
    let fields = expr.split_whitespace().count();
    let normalized = match fields {
        5 => format!("0 {}", expr.trim()),
        6 | 7 => expr.trim().to_owned(),
        n => return Err(format!("expected 5, 6 or 7 fields, found {n}")),
    };
    <cron::Schedule as std::str::FromStr>::from_str(&normalized)
        .map(|_| normalized)
        // The parser's message repeats the input with a caret; keep only its reason line.
        .map_err(|e| {
            e.to_string()
                .lines()
                .map(str::trim)
                .rfind(|l| !l.is_empty())
                .unwrap_or_default()
                .to_owned()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(tokens: TokenStream) -> (JobArgs, Result<(), syn::Error>) {
        let mut errors = Errors::default();
        let args = JobArgs::parse(tokens, &mut errors);
        (args, errors.finish())
    }

    #[test]
    fn parses_every_key() {
        let (args, result) = parse(quote!(
            name = "mail.welcome",
            queue = "mail",
            priority = -3,
            max_attempts = 5,
            backoff = "linear",
            backoff_base = "2s",
            backoff_max = "1m",
            timeout = "30s",
            schedule = "*/5 * * * *",
            timezone = "Europe/Paris"
        ));
        assert!(result.is_ok());
        assert_eq!(args.timezone.map(|t| t.0).as_deref(), Some("Europe/Paris"));
        assert_eq!(
            args.name.map(|l| l.value()).as_deref(),
            Some("mail.welcome")
        );
        assert_eq!(args.priority, Some(-3));
        assert_eq!(args.max_attempts, Some(5));
        assert!(matches!(args.backoff, Some(BackoffArg::Linear)));
        assert_eq!(args.backoff_base, Some(Duration::from_secs(2)));
        assert_eq!(args.timeout, Some(Duration::from_secs(30)));
        assert_eq!(args.schedule.map(|s| s.0).as_deref(), Some("0 */5 * * * *"));
    }

    #[test]
    fn reports_all_errors_together() {
        let (_, result) = parse(quote!(
            priority = "high",
            bogus = 1,
            max_attempts = 0,
            timezone = "Europe Paris"
        ));
        let messages: Vec<String> = result
            .err()
            .into_iter()
            .flatten()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert!(messages[3].contains("`timezone` is an IANA zone name"));
        assert!(messages[0].contains("`priority` expects an integer literal"));
        assert!(messages[1].contains("unknown #[job] key `bogus`"));
        assert!(messages[2].contains("`max_attempts` must be an integer from 1"));
    }

    #[test]
    fn cron_forms() {
        assert_eq!(normalize_cron("0 0 3 * * *").as_deref(), Ok("0 0 3 * * *"));
        assert_eq!(normalize_cron("0 3 * * *").as_deref(), Ok("0 0 3 * * *"));
        assert!(normalize_cron("every day").is_err());
        assert!(normalize_cron("61 * * * *").is_err());
    }
}
