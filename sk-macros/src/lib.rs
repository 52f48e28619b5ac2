//! The `#[job]` attribute of [sk](https://docs.rs/sk-runtime).
//!
//! Depend on `sk-runtime`, which re-exports this macro together with everything the
//! generated code needs; the full documentation of every key lives there, on
//! `sk_runtime::job`.

mod args;
mod expand;
mod input;
mod schema;

use proc_macro::TokenStream;

/// Turns an `async fn` into a background job type. See `sk_runtime::job` for the keys and
/// examples.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::job(attr.into(), item.into()).into()
}
