//! The JSON Schema of a job's arguments: the object schema built field by field, each
//! field as serde reads it (`rename`, `alias`, `default`, `with`, `skip`, `flatten`).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, LitStr, Type};

use crate::input::Arg;

/// What the `#[serde(...)]` of one argument says about how it is read.
#[derive(Default)]
struct Serde {
    rename: Option<String>,
    aliases: Vec<String>,
    default: bool,
    /// `with` or `deserialize_with`: the function's path, as written.
    with: Option<String>,
    skip: bool,
    flatten: bool,
}

impl Serde {
    /// Reads the attributes; what serde itself would refuse is left to serde's error.
    fn of(attrs: &[Attribute]) -> Self {
        let mut serde = Serde::default();
        for attr in attrs {
            let _ = attr.parse_nested_meta(|meta| {
                let key = meta.path.get_ident().map(ToString::to_string);
                match key.as_deref() {
                    Some("rename") if meta.input.peek(syn::Token![=]) => {
                        serde.rename = Some(meta.value()?.parse::<LitStr>()?.value());
                    }
                    Some("rename") => meta.parse_nested_meta(|inner| {
                        let value = inner.value()?.parse::<LitStr>()?.value();
                        if inner.path.is_ident("deserialize") {
                            serde.rename = Some(value);
                        }
                        Ok(())
                    })?,
                    Some("alias") => serde.aliases.push(meta.value()?.parse::<LitStr>()?.value()),
                    Some("default") => {
                        serde.default = true;
                        if meta.input.peek(syn::Token![=]) {
                            meta.value()?.parse::<LitStr>()?;
                        }
                    }
                    Some("with" | "deserialize_with") => {
                        serde.with = Some(meta.value()?.parse::<LitStr>()?.value());
                    }
                    Some("skip" | "skip_deserializing") => serde.skip = true,
                    Some("flatten") => serde.flatten = true,
                    _ => skip_value(&meta)?,
                }
                Ok(())
            });
        }
        serde
    }
}

/// Consumes an attribute's value (`= ...` or `(...)`) that the schema does not need.
fn skip_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<TokenStream>()?;
    }
    Ok(())
}

/// Whether serde reads a missing field of this type as `None`.
fn is_option(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|seg| seg.ident == "Option"),
        Type::Group(group) => is_option(&group.elem),
        Type::Paren(paren) => is_option(&paren.elem),
        _ => false,
    }
}

/// The argument's name as written in the fn.
fn rust_name(arg: &Arg) -> String {
    arg.ident.to_string().trim_start_matches("r#").to_owned()
}

/// The key of argument `arg` in the payload, as serde reads it (after `rename`).
pub(crate) fn payload_key(arg: &Arg) -> String {
    Serde::of(&arg.serde)
        .rename
        .unwrap_or_else(|| rust_name(arg))
}

/// The fn `__sk_args_schema` of the registration: the payload arguments' object schema.
pub(crate) fn args_schema<'a>(payload: impl Iterator<Item = &'a Arg>) -> TokenStream {
    let p = quote!(::sk_runtime::__private);
    let mut steps = Vec::new();
    for arg in payload {
        let serde = Serde::of(&arg.serde);
        if serde.skip {
            continue;
        }
        let ty = &arg.ty;
        let value = match &serde.with {
            Some(path) => {
                let what = format!("read with `{path}`: any JSON (the worker checks it)");
                quote!(#p::ArgsSchema::unchecked(#what))
            }
            None => quote_spanned! {ty.span()=>
                (&&#p::SchemaTag::<#ty>::new()).field_schema(generator)
            },
        };
        if serde.flatten {
            steps.push(quote!(.flatten(#value)));
            continue;
        }
        let name = serde.rename.unwrap_or_else(|| rust_name(arg));
        let aliases = &serde.aliases;
        let required = !serde.default && (serde.with.is_some() || !is_option(ty));
        steps.push(quote!(.field(#name, &[#(#aliases),*], #required, #value)));
    }
    quote! {
        fn __sk_args_schema(generator: &mut #p::SchemaGenerator) -> #p::serde_json::Value {
            #[allow(unused_imports)]
            use #p::{ViaJsonSchema as _, ViaNoSchema as _};
            #p::ArgsSchema::new() #( #steps )* .finish(generator)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_of(attr: &str) -> Serde {
        let tokens: TokenStream = attr.parse().expect("tokens");
        let attrs: Vec<Attribute> = vec![syn::parse_quote!(#[serde(#tokens)])];
        Serde::of(&attrs)
    }

    #[test]
    fn serde_attributes_as_the_schema_reads_them() {
        let s = serde_of(r#"rename = "id", alias = "uid", alias = "user", default"#);
        assert_eq!(s.rename.as_deref(), Some("id"));
        assert_eq!(s.aliases, ["uid", "user"]);
        assert!(s.default && !s.skip && !s.flatten);
        let s = serde_of(r#"rename(serialize = "out", deserialize = "in")"#);
        assert_eq!(s.rename.as_deref(), Some("in"));
        let s = serde_of(r#"default = "seven", with = "my::codec""#);
        assert!(s.default);
        assert_eq!(s.with.as_deref(), Some("my::codec"));
        let s = serde_of(
            r#"skip_serializing_if = "Option::is_none", bound(deserialize = "T: X"), flatten"#,
        );
        assert!(s.flatten && s.rename.is_none());
        assert!(serde_of("skip_deserializing").skip);
    }

    #[test]
    fn a_payload_key_is_the_name_serde_reads() {
        let arg = |serde: Vec<Attribute>| Arg {
            ident: syn::parse_quote!(r#type),
            ty: syn::parse_quote!(String),
            injected: false,
            transaction: None,
            serde,
            inputs: None,
        };
        assert_eq!(payload_key(&arg(Vec::new())), "type");
        let renamed = vec![syn::parse_quote!(#[serde(rename = "kind", alias = "t")])];
        assert_eq!(payload_key(&arg(renamed)), "kind");
    }

    #[test]
    fn options_are_not_required() {
        assert!(is_option(&syn::parse_quote!(Option<i64>)));
        assert!(is_option(&syn::parse_quote!(std::option::Option<String>)));
        assert!(!is_option(&syn::parse_quote!(Vec<Option<i64>>)));
    }
}
