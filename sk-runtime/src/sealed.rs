//! Sealed arguments (`#[job(encrypted)]`): a job's payload stored encrypted with
//! XChaCha20-Poly1305 under the newest of the process's [`PayloadKeys`], bound to its task
//! type, and opened only by a worker that holds the key named in it.
//!
//! A sealed payload is the JSON object `{"sk_sealed": {"v": 1, "key": ID, "nonce": B64,
//! "data": B64}}`: one key, so that every backend stores it starting with `{"sk_sealed"`
//! (PostgreSQL's `jsonb` orders keys), which is how a worker tells it from a plain one
//! (a job posted before its type was sealed) without parsing it. Only a sealed type's
//! payloads are opened: any other type's arguments are read by serde as they are.

use std::sync::{Arc, RwLock};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::error::{Error, JobError, Result};

/// What every sealed payload starts with, as stored.
const SEALED_PREFIX: &str = "{\"sk_sealed\"";

/// The version of the envelope: XChaCha20-Poly1305, the task type as associated data.
const VERSION: u64 = 1;

/// The longest key id, in characters.
const MAX_KEY_ID_CHARS: usize = 64;

/// The keys that seal and open job arguments (`#[job(encrypted)]`): the newest seals,
/// any opens, so keys rotate by adding a new one first and dropping the old one once no
/// job sealed with it is left.
///
/// ```
/// use sk_runtime::PayloadKeys;
///
/// // Each key is 32 random bytes, named by an id stored beside every payload it seals.
/// let keys = PayloadKeys::new("2026-11", [7u8; 32]).unwrap()
///     .with_older("2026-05", [9u8; 32]).unwrap();
/// // Or from text, as kept in a secret store: `id:base64`, newest first.
/// let same = PayloadKeys::parse("2026-11:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=").unwrap();
/// assert_eq!(keys.ids(), ["2026-11", "2026-05"]);
/// assert_eq!(same.ids(), ["2026-11"]);
/// sk_runtime::set_payload_keys(keys);
/// ```
#[derive(Clone)]
pub struct PayloadKeys {
    /// Newest first.
    keys: Vec<(String, XChaCha20Poly1305)>,
}

impl std::fmt::Debug for PayloadKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ids only: a key never reaches a log.
        f.debug_struct("PayloadKeys")
            .field("ids", &self.ids())
            .finish()
    }
}

impl PayloadKeys {
    /// One key, which seals and opens: `id` (1 to 64 characters of letters, digits,
    /// `-`, `_`, `.`) names it in every payload it seals.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad id.
    pub fn new(id: &str, key: [u8; 32]) -> Result<Self> {
        check_id(id)?;
        Ok(PayloadKeys {
            keys: vec![(id.to_owned(), XChaCha20Poly1305::new(&key.into()))],
        })
    }

    /// These keys and an older one, which opens what it sealed but seals nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad id or one already given.
    pub fn with_older(mut self, id: &str, key: [u8; 32]) -> Result<Self> {
        check_id(id)?;
        if self.keys.iter().any(|(known, _)| known == id) {
            return Err(Error::invalid(
                "payload key",
                format!("id {id:?} is given twice"),
            ));
        }
        self.keys
            .push((id.to_owned(), XChaCha20Poly1305::new(&key.into())));
        Ok(self)
    }

    /// Keys from text: `id:base64` pairs separated by commas, newest first, each key 32
    /// bytes in standard base64 (`openssl rand -base64 32`).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the pair at fault (never the key).
    pub fn parse(text: &str) -> Result<Self> {
        let mut keys: Option<PayloadKeys> = None;
        for (n, pair) in text.split(',').map(str::trim).enumerate() {
            let (id, encoded) = pair.split_once(':').ok_or_else(|| {
                Error::invalid("payload keys", format!("pair {} is not `id:base64`", n + 1))
            })?;
            let bytes = BASE64.decode(encoded.trim()).map_err(|e| {
                Error::invalid(
                    "payload keys",
                    format!("key {id:?} is not standard base64: {e}"),
                )
            })?;
            let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                Error::invalid(
                    "payload keys",
                    format!("key {id:?} is {} bytes; a key is 32", b.len()),
                )
            })?;
            keys = Some(match keys {
                None => PayloadKeys::new(id, key)?,
                Some(keys) => keys.with_older(id, key)?,
            });
        }
        keys.ok_or_else(|| Error::invalid("payload keys", "no key given"))
    }

    /// The ids, newest (the one that seals) first.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// `payload` sealed with the newest key, for a job of `task_type`.
    fn seal(&self, task_type: &str, payload: &str) -> Result<String> {
        let (id, cipher) = &self.keys[0];
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: payload.as_bytes(),
                    aad: task_type.as_bytes(),
                },
            )
            .map_err(|_| Error::invalid("payload", "cannot be sealed"))?;
        Ok(serde_json::json!({ "sk_sealed": {
            "v": VERSION,
            "key": id,
            "nonce": BASE64.encode(nonce),
            "data": BASE64.encode(sealed),
        }})
        .to_string())
    }

    /// The plain payload of a sealed one of a job of `task_type`.
    fn open(&self, task_type: &str, envelope: &Envelope) -> std::result::Result<String, String> {
        let Some((_, cipher)) = self.keys.iter().find(|(id, _)| *id == envelope.key) else {
            return Err(format!(
                "its arguments are sealed with payload key {:?}, which this worker does not have (it has {})",
                envelope.key,
                quoted(&self.ids())
            ));
        };
        let nonce = BASE64
            .decode(&envelope.nonce)
            .ok()
            .filter(|n| n.len() == 24)
            .ok_or_else(|| {
                format!(
                    "its sealed arguments (key {:?}) have a malformed nonce",
                    envelope.key
                )
            })?;
        let data = BASE64.decode(&envelope.data).map_err(|e| {
            format!(
                "its sealed arguments (key {:?}) are not base64: {e}",
                envelope.key
            )
        })?;
        let plain = cipher
            .decrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &data,
                    aad: task_type.as_bytes(),
                },
            )
            .map_err(|_| {
                format!(
                    "its arguments do not open with payload key {:?}: this worker's key of that id is not the one that sealed them, or they were altered or sealed for another task type",
                    envelope.key
                )
            })?;
        String::from_utf8(plain).map_err(|_| {
            format!(
                "its arguments opened with payload key {:?} are not text",
                envelope.key
            )
        })
    }
}

fn check_id(id: &str) -> Result<()> {
    let fits = !id.is_empty()
        && id.chars().count() <= MAX_KEY_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fits {
        Ok(())
    } else {
        Err(Error::invalid(
            "payload key",
            format!("id {id:?} is not 1 to {MAX_KEY_ID_CHARS} letters, digits, `-`, `_` or `.`"),
        ))
    }
}

fn quoted(ids: &[&str]) -> String {
    if ids.is_empty() {
        return "none".to_owned();
    }
    ids.iter()
        .map(|id| format!("{id:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The process's keys ([`set_payload_keys`]).
static KEYS: RwLock<Option<Arc<PayloadKeys>>> = RwLock::new(None);

/// Sets the keys this process seals `#[job(encrypted)]` arguments with at enqueue, and its
/// workers open them with (unless [`WorkerBuilder::payload_keys`](crate::WorkerBuilder::payload_keys)
/// gives one others). Call it once at start, before the first enqueue; a later call
/// replaces the keys (a rotation without a restart).
pub fn set_payload_keys(keys: PayloadKeys) {
    *KEYS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(keys));
}

/// The process's keys, if set.
pub(crate) fn process_keys() -> Option<Arc<PayloadKeys>> {
    KEYS.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Seals the payload of a job about to be posted if its type is `encrypted`, with the
/// process's newest key.
///
/// # Errors
/// As [`seal_payload`].
pub(crate) fn seal_new_job(job: &mut crate::store::NewJob, encrypted: bool) -> Result<()> {
    if encrypted {
        let payload = std::mem::take(&mut job.payload);
        job.payload = seal_payload(&job.task_type, payload, true)?;
    }
    Ok(())
}

/// Seals `payload` of a job of `task_type` for storing, if the type is `encrypted`.
///
/// # Errors
/// [`Error::Invalid`] when no keys are set.
pub(crate) fn seal_payload(task_type: &str, payload: String, encrypted: bool) -> Result<String> {
    if !encrypted {
        return Ok(payload);
    }
    let keys = process_keys().ok_or_else(|| {
        Error::invalid(
            "payload",
            format!(
                "job `{task_type}` has sealed arguments (#[job(encrypted)]) and this process has no payload keys: call sk_runtime::set_payload_keys at start"
            ),
        )
    })?;
    keys.seal(task_type, &payload)
}

/// The envelope of a sealed payload.
#[derive(serde::Deserialize)]
struct Envelope {
    v: u64,
    key: String,
    nonce: String,
    data: String,
}

#[derive(serde::Deserialize)]
struct Sealed {
    sk_sealed: Envelope,
}

/// Whether a stored payload is sealed (cheap: its first characters).
pub(crate) fn is_sealed(payload: &str) -> bool {
    payload.starts_with(SEALED_PREFIX)
}

impl crate::JobRecord {
    /// The id of the payload key its arguments are sealed with (`#[job(encrypted)]`);
    /// `None` for plain arguments. Only a worker holding that key reads them.
    pub fn sealed_with(&self) -> Option<String> {
        let payload = self.payload.as_deref().filter(|p| is_sealed(p))?;
        serde_json::from_str::<Sealed>(payload)
            .ok()
            .map(|s| s.sk_sealed.key)
    }
}

/// Opens a claimed job's payload in place if it is sealed, with the worker's keys; a
/// plain payload is left as it is (a job posted before its type was sealed).
///
/// # Errors
/// A fatal [`JobError`] of kind `payload_key`, naming the key, when it does not open.
pub(crate) fn open_claimed(
    keys: Option<&PayloadKeys>,
    task_type: &str,
    payload: &mut Option<String>,
) -> std::result::Result<(), JobError> {
    let Some(text) = payload.as_deref().filter(|p| is_sealed(p)) else {
        return Ok(());
    };
    let fail = |why: String| JobError::fatal(why).with_kind("payload_key");
    let sealed: Sealed = serde_json::from_str(text)
        .map_err(|e| fail(format!("its sealed arguments are malformed: {e}")))?;
    let envelope = sealed.sk_sealed;
    if envelope.v != VERSION {
        return Err(fail(format!(
            "its arguments are sealed in version {} of the envelope; this worker reads version {VERSION}",
            envelope.v
        )));
    }
    let Some(keys) = keys else {
        return Err(fail(format!(
            "its arguments are sealed with payload key {:?} and this worker has no payload keys (sk_runtime::set_payload_keys, or WorkerBuilder::payload_keys)",
            envelope.key
        )));
    };
    *payload = Some(keys.open(task_type, &envelope).map_err(fail)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn envelope(sealed: &str) -> Envelope {
        serde_json::from_str::<Sealed>(sealed).unwrap().sk_sealed
    }

    #[test]
    fn the_newest_key_seals_and_any_opens_for_the_same_task_type() {
        let old = PayloadKeys::new("k1", [1; 32]).unwrap();
        let sealed = old.seal("charge", r#"{"card":"4242"}"#).unwrap();
        assert!(is_sealed(&sealed) && !sealed.contains("4242"));
        let rotated = PayloadKeys::new("k2", [2; 32])
            .unwrap()
            .with_older("k1", [1; 32])
            .unwrap();
        assert_eq!(envelope(&rotated.seal("charge", "{}").unwrap()).key, "k2");
        let opened = rotated.open("charge", &envelope(&sealed)).unwrap();
        assert_eq!(opened, r#"{"card":"4242"}"#);
        // Bound to its task type; a key of the same id but other bytes does not open it.
        let moved = rotated.open("refund", &envelope(&sealed)).unwrap_err();
        assert!(
            moved.contains("\"k1\"") && moved.contains("altered"),
            "{moved}"
        );
        let other = PayloadKeys::new("k1", [9; 32]).unwrap();
        assert!(other.open("charge", &envelope(&sealed)).is_err());
        let missing = PayloadKeys::new("k3", [3; 32]).unwrap();
        let why = missing.open("charge", &envelope(&sealed)).unwrap_err();
        assert!(why.contains("\"k1\"") && why.contains("\"k3\""), "{why}");
        // Two seals of one payload differ (a fresh nonce each).
        assert_ne!(
            old.seal("charge", "{}").unwrap(),
            old.seal("charge", "{}").unwrap()
        );
    }

    #[test]
    fn keys_from_text_name_the_pair_at_fault() {
        let keys = PayloadKeys::parse(&format!(
            "new:{}, old:{}",
            BASE64.encode([1u8; 32]),
            BASE64.encode([2u8; 32])
        ))
        .unwrap();
        assert_eq!(keys.ids(), ["new", "old"]);
        assert!(!format!("{keys:?}").contains("AQEB"), "no key in Debug");
        for (text, says) in [
            ("", "not `id:base64`"),
            ("k1:not base64!", "\"k1\" is not standard base64"),
            (&format!("k1:{}", BASE64.encode([1u8; 16])), "16 bytes"),
            (&format!("a b:{}", BASE64.encode([1u8; 32])), "\"a b\""),
            (
                &format!("k1:{0},k1:{0}", BASE64.encode([1u8; 32])),
                "given twice",
            ),
        ] {
            let error = PayloadKeys::parse(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_claimed_payload_opens_in_place_or_fails_for_good_naming_the_key() {
        let keys = PayloadKeys::new("k1", [1; 32]).unwrap();
        let mut payload = Some(keys.seal("charge", r#"{"n":1}"#).unwrap());
        open_claimed(Some(&keys), "charge", &mut payload).unwrap();
        assert_eq!(payload.as_deref(), Some(r#"{"n":1}"#));
        // A plain payload (posted before the type was sealed) is left as it is.
        open_claimed(Some(&keys), "charge", &mut payload).unwrap();
        assert_eq!(payload.as_deref(), Some(r#"{"n":1}"#));
        let mut payload = Some(keys.seal("charge", "{}").unwrap());
        let error = open_claimed(None, "charge", &mut payload).unwrap_err();
        assert!(error.is_fatal() && error.kind() == "payload_key");
        assert!(error.message().contains("\"k1\""), "{}", error.message());
    }
}
