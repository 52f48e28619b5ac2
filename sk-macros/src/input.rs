//! Stage two: the annotated fn into a typed [`JobFn`].

use proc_macro2::Ident;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, ItemFn, Pat, Type};

use crate::args::Errors;

/// One argument of the job fn.
pub(crate) struct Arg {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
    /// Supplied by the worker (`JobContext`, `Data<T>`), not part of the payload.
    pub(crate) injected: bool,
    /// For `tx: &mut T`, the job's transaction: `T`.
    pub(crate) transaction: Option<Type>,
    /// `#[serde(...)]` written on the argument: moved to the job type's field.
    pub(crate) serde: Vec<Attribute>,
    /// For `Input<T>` (false) or `Inputs<T>` (true), the outputs of the jobs it waited
    /// on: whether many, and `T`.
    pub(crate) inputs: Option<(bool, Type)>,
}

/// The checked fn.
pub(crate) struct JobFn {
    pub(crate) item: ItemFn,
    pub(crate) args: Vec<Arg>,
}

impl JobFn {
    pub(crate) fn payload(&self) -> impl Iterator<Item = &Arg> {
        self.args.iter().filter(|a| !a.injected)
    }

    /// Checks the fn's shape; every problem is recorded in `errors`.
    pub(crate) fn check(mut item: ItemFn, errors: &mut Errors) -> Self {
        // `#[serde(...)]` on an argument belongs to the job type's field, not to the fn
        // (where the compiler would reject it).
        let mut serde = Vec::new();
        for input in &mut item.sig.inputs {
            let attrs = match input {
                FnArg::Typed(typed) => &mut typed.attrs,
                FnArg::Receiver(receiver) => &mut receiver.attrs,
            };
            let (ours, rest): (Vec<Attribute>, Vec<Attribute>) = std::mem::take(attrs)
                .into_iter()
                .partition(|a| a.path().is_ident("serde"));
            *attrs = rest;
            serde.push(ours);
        }
        let mut serde = serde.into_iter();
        let sig = &item.sig;
        if sig.asyncness.is_none() {
            errors.at(
                sig.fn_token.span,
                "#[job] functions must be `async`: write `async fn`",
            );
        }
        if let Some(param) = sig.generics.params.first() {
            errors.at(
                param.span(),
                "#[job] functions cannot be generic: a job's payload type must be concrete",
            );
        }
        if let Some(clause) = &sig.generics.where_clause {
            errors.at(
                clause.span(),
                "#[job] functions cannot have a `where` clause",
            );
        }
        if let Some(variadic) = &sig.variadic {
            errors.at(variadic.span(), "#[job] functions cannot be variadic");
        }
        let mut args = Vec::new();
        for input in &sig.inputs {
            let serde = serde.next().unwrap_or_default();
            match input {
                FnArg::Receiver(receiver) => errors.at(
                    receiver.span(),
                    "#[job] functions cannot take `self`: write a free function",
                ),
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                        let transaction = match &*typed.ty {
                            Type::Reference(r) if r.mutability.is_some() => Some((*r.elem).clone()),
                            Type::Reference(r) => {
                                errors.at(
                                    r.span(),
                                    "#[job] arguments are owned, as payload arguments are deserialized; the one reference a job takes is its transaction, `tx: &mut sqlx::Transaction<'_, DB>`",
                                );
                                None
                            }
                            _ => None,
                        };
                        if transaction.is_some() && args.iter().any(|a: &Arg| a.transaction.is_some()) {
                            errors.at(
                                typed.ty.span(),
                                "a #[job] fn takes at most one transaction",
                            );
                        }
                        let inputs = inputs_of(&typed.ty);
                        if let (Some(_), Some(first)) =
                            (&inputs, args.iter().find(|a: &&Arg| a.inputs.is_some()))
                        {
                            errors.at(
                                typed.ty.span(),
                                format!(
                                    "a #[job] fn takes the outputs of the jobs it waited on once, and `{}` takes them already",
                                    first.ident
                                ),
                            );
                        }
                        let injected =
                            transaction.is_some() || inputs.is_some() || is_injected(&typed.ty);
                        if let (true, Some(attr)) = (injected, serde.first()) {
                            errors.at(
                                attr.span(),
                                "`#[serde]` applies to payload arguments; `JobContext`, `Data<T>`, `Input<T>`, `Inputs<T>`, `BatchDone` and the transaction are not serialized",
                            );
                        }
                        args.push(Arg {
                            ident: pat.ident.clone(),
                            ty: (*typed.ty).clone(),
                            injected,
                            transaction,
                            serde,
                            inputs,
                        });
                    }
                    other => errors.at(
                        other.span(),
                        "#[job] arguments must be plain names, like `user_id: i64`; they become fields of the job type",
                    ),
                },
            }
        }
        JobFn { item, args }
    }
}

/// For `Input<T>` and `Inputs<T>`: whether many, and `T`.
fn inputs_of(ty: &Type) -> Option<(bool, Type)> {
    let Type::Path(path) = ty else { return None };
    let seg = path.path.segments.last()?;
    let many = match seg.ident.to_string().as_str() {
        "Input" => false,
        "Inputs" => true,
        _ => return None,
    };
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        syn::GenericArgument::Type(t) => Some((many, t.clone())),
        _ => None,
    })
}

/// `JobContext`, `Data<T>` and `BatchDone` are provided by the worker at run time.
fn is_injected(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last().is_some_and(|seg| {
            seg.ident == "JobContext" || seg.ident == "Data" || seg.ident == "BatchDone"
        }),
        _ => false,
    }
}
