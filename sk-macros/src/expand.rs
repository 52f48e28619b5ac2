//! Stage three: code generation only; everything was checked by `args` and `input`.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::ItemFn;

use crate::args::{BackoffArg, Errors, JobArgs};
use crate::input::JobFn;

/// Entry point: parse, check, then expand; on error the fn is emitted unchanged beside
/// the errors so that one mistake does not cascade.
pub(crate) fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item_fn: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let error = syn::Error::new(Span::call_site(), "#[job] goes on an `async fn`");
            let error = error.to_compile_error();
            return quote!(#error #item);
        }
    };
    let mut errors = Errors::default();
    let args = JobArgs::parse(attr, &mut errors);
    let job_fn = JobFn::check(item_fn, &mut errors);
    let timed = [
        args.schedule
            .as_ref()
            .map(|(_, lit)| ("schedule", lit.span())),
        args.every.as_ref().map(|(_, span)| ("every", *span)),
    ];
    for (key, span) in timed.iter().flatten() {
        let payload: Vec<String> = job_fn.payload().map(|a| a.ident.to_string()).collect();
        if !payload.is_empty() {
            errors.at(
                *span,
                format!(
                    "`{key}` needs a fn without payload arguments, but this fn takes {}; a scheduled job is enqueued by the worker with no arguments",
                    payload.join(", ")
                ),
            );
        }
    }
    if let (None, Some((_, span))) = (&args.schedule, &args.overlap) {
        errors.at(
            *span,
            "`overlap` applies to `schedule`: whether a cron tick may start while the last one still runs",
        );
    }
    if let (None, Some((_, span))) = (&args.schedule, &args.timezone) {
        errors.at(
            *span,
            "`timezone` applies to `schedule`: the zone its cron ticks are in (UTC by default)",
        );
    }
    if let (None, Some((_, span))) = (&args.schedule, &args.run_missed) {
        errors.at(
            *span,
            "`missed` applies to `schedule`: whether the latest tick missed while no worker ran is run at start",
        );
    }
    if let (None, Some((_, span))) = (&args.every, &args.after_due) {
        errors.at(
            *span,
            "`after` applies to `every`: whether the period runs from when the last run was due or from when it ended",
        );
    }
    if let Some(tenant) = &args.tenant {
        let payload: Vec<String> = job_fn.payload().map(|a| a.ident.to_string()).collect();
        if !payload.contains(&tenant.to_string()) {
            let have = if payload.is_empty() {
                "it takes none".to_owned()
            } else {
                format!("it takes {}", payload.join(", "))
            };
            errors.at(
                tenant.span(),
                format!("`tenant = {tenant}` names no payload argument of this fn ({have}); the job's tenant is the value of one of them"),
            );
        }
    }
    if let (Some(_), Some((_, span))) = (&args.schedule, &args.every) {
        errors.at(
            *span,
            "`every` and `schedule` cannot be combined: `every` runs the job again a fixed time after each run ends, `schedule` at cron ticks",
        );
    }
    match errors.finish() {
        Ok(()) => generate(&args, &job_fn),
        Err(error) => {
            let error = error.to_compile_error();
            let item = &job_fn.item;
            quote!(#error #item)
        }
    }
}

fn pascal_case(ident: &Ident) -> Ident {
    let snake = ident.to_string();
    let mut out = String::with_capacity(snake.len());
    let mut upper = true;
    for c in snake.trim_start_matches("r#").chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    Ident::new(&out, ident.span())
}

fn duration_tokens(d: Option<std::time::Duration>) -> TokenStream {
    match d {
        Some(d) => {
            let millis = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            quote!(::core::option::Option::Some(::sk_runtime::__private::Duration::from_millis(#millis)))
        }
        None => quote!(::core::option::Option::None),
    }
}

fn generate(args: &JobArgs, job_fn: &JobFn) -> TokenStream {
    let item = &job_fn.item;
    let vis = &item.vis;
    let fn_ident = &item.sig.ident;
    let ty = pascal_case(fn_ident);
    let task_type = args.name.as_ref().map_or_else(
        || fn_ident.to_string().trim_start_matches("r#").to_owned(),
        |l| l.value(),
    );
    let p = quote!(::sk_runtime::__private);

    let fields: Vec<&Ident> = job_fn.payload().map(|a| &a.ident).collect();
    let field_tys: Vec<&syn::Type> = job_fn.payload().map(|a| &a.ty).collect();
    let field_serde: Vec<&[syn::Attribute]> = job_fn.payload().map(|a| &a.serde[..]).collect();
    let field_docs = fields
        .iter()
        .map(|f| format!("Argument `{f}` of [`{fn_ident}`]."));
    let struct_doc = format!(
        "The job of [`{fn_ident}`], generated by `#[job]`: its fields are the fn's payload arguments, serialized into the queue. Task type `\"{task_type}\"`."
    );

    // Serializability is checked per argument so the error points at the argument's type.
    let payload_checks = field_tys.iter().map(|t| {
        quote_spanned! {t.span()=> #p::assert_payload::<#t>(); }
    });

    // Injected arguments are resolved before the future is built, so a missing
    // `Data<T>` is reported as a job error instead of a panic.
    let mut injections = Vec::new();
    let mut call_args = Vec::new();
    let mut requirements = Vec::new();
    let mut transaction = None;
    for (i, arg) in job_fn.args.iter().enumerate() {
        let arg_ty = &arg.ty;
        if let Some(tx_ty) = &arg.transaction {
            requirements.push(quote_spanned! {tx_ty.span()=>
                requirements.extend(<#tx_ty as #p::JobTransaction>::requirement());
            });
            call_args.push(quote!(&mut __sk_tx));
            transaction = Some(tx_ty);
        } else if arg.injected {
            let local = format_ident!("__sk_inject_{}", i);
            injections.push(quote_spanned! {arg_ty.span()=>
                let #local: #arg_ty = <#arg_ty as #p::Inject>::inject(&input)?;
            });
            requirements.push(quote_spanned! {arg_ty.span()=>
                requirements.extend(<#arg_ty as #p::Inject>::requirement());
            });
            call_args.push(quote!(#local));
        } else {
            let ident = &arg.ident;
            call_args.push(quote!(__sk_job.#ident));
        }
    }

    let queue = args
        .queue
        .as_ref()
        .map_or_else(|| "default".to_owned(), |l| l.value());
    let priority = args.priority.unwrap_or(0);
    let max_attempts = match args.max_attempts {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let base = duration_tokens(args.backoff_base);
    let max = duration_tokens(args.backoff_max);
    let backoff = match &args.backoff {
        None | Some(BackoffArg::Exponential) => {
            quote!(::sk_runtime::Backoff::exponential(#base, #max))
        }
        Some(BackoffArg::Linear) => quote!(::sk_runtime::Backoff::linear(#base, #max)),
        Some(BackoffArg::Constant) => quote!(::sk_runtime::Backoff::constant(#base)),
        Some(BackoffArg::Custom(path)) => {
            quote_spanned! {path.span()=> ::sk_runtime::Backoff::Custom(#path) }
        }
    };
    let timeout = duration_tokens(args.timeout);
    let encrypted = if args.encrypted {
        quote! { .sealed() }
    } else {
        quote! {}
    };
    let every = duration_tokens(args.every.map(|(d, _)| d));
    let rate = match args.rate {
        Some((count, window)) => {
            let millis = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
            quote!(::core::option::Option::Some((#count, ::sk_runtime::__private::Duration::from_millis(#millis))))
        }
        None => quote!(::core::option::Option::None),
    };
    // The tenant derived from an argument; its type must be a `TenantKey`, and the
    // error says so at the argument.
    let tenant = args.tenant.as_ref().map(|field| {
        let ty = job_fn.payload().find(|a| a.ident == *field).map(|a| &a.ty);
        let span = ty.map_or_else(|| field.span(), syn::spanned::Spanned::span);
        // At the argument's type: where a type that is no `TenantKey` is reported.
        let field = Ident::new(&field.to_string(), span);
        quote_spanned! {span=>
            fn tenant(&self) -> ::core::option::Option<::std::string::String> {
                ::sk_runtime::TenantKey::tenant_key(&self.#field)
            }
        }
    });
    let every_after_due = args.after_due.is_some_and(|(b, _)| b);
    let overlap = args.overlap.is_some_and(|(b, _)| b);
    let run_missed = args.run_missed.is_some_and(|(b, _)| b);
    let schedule = match &args.schedule {
        // The worker reads the zone from the expression's `CRON_TZ=` prefix.
        Some((expr, _)) => {
            let expr = match &args.timezone {
                Some((zone, _)) => format!("CRON_TZ={zone} {expr}"),
                None => expr.clone(),
            };
            quote!(::core::option::Option::Some(#expr))
        }
        None => quote!(::core::option::Option::None),
    };
    let output = match &item.sig.output {
        syn::ReturnType::Default => quote!(()),
        syn::ReturnType::Type(_, t) => quote!(#t),
    };
    // Autoref picks `IntoJobResult`, else an error by its text (`anyhow::Error`).
    let into_result = quote_spanned! {output.span()=>
        ({
            #[allow(unused_imports)]
            use #p::{ViaDisplay as _, ViaIntoJobResult as _};
            (&&#p::ResultTag::<#output>::new()).converter()
        })
    };

    let job_output = quote_spanned! {output.span()=> <#output as #p::JobReturn>::Ok };
    let takes_transaction = transaction.is_some();
    let args_schema = crate::schema::args_schema(job_fn.payload());
    // The tenant argument's key in the payload, where producers in other languages read it.
    let tenant_from = match args
        .tenant
        .as_ref()
        .and_then(|field| job_fn.payload().find(|a| a.ident == *field))
    {
        Some(arg) => {
            let key = crate::schema::payload_key(arg);
            quote!(::core::option::Option::Some(#key))
        }
        None => quote!(::core::option::Option::None),
    };
    // Which stages the job may follow in a `Workflow` (`Accepts`).
    let accepts = match job_fn.args.iter().find_map(|a| a.inputs.as_ref()) {
        Some((false, t)) => quote_spanned! {t.span()=>
            impl #p::Accepts<#t, #p::One> for #ty {}
        },
        Some((true, t)) => quote_spanned! {t.span()=>
            impl<N> #p::Accepts<#t, N> for #ty {}
        },
        None => quote! {
            impl<O, N> #p::Accepts<O, N> for #ty {}
        },
    };
    // A job with a transaction: its success is recorded in it before it commits.
    let run = match transaction {
        None => quote! {
            ::core::result::Result::Ok(::std::boxed::Box::pin(async move {
                #into_result(#fn_ident(#( #call_args ),*).await)
            }))
        },
        Some(tx_ty) => quote_spanned! {tx_ty.span()=>
            let __sk_source = input.transaction()?;
            ::core::result::Result::Ok(::std::boxed::Box::pin(async move {
                let mut __sk_tx: #tx_ty = <#tx_ty as #p::JobTransaction>::begin(&__sk_source).await?;
                let __sk_outcome = #into_result(#fn_ident(#( #call_args ),*).await);
                #p::JobTransaction::finish(__sk_tx, __sk_source, __sk_outcome).await
            }))
        },
    };

    quote! {
        #item

        #[doc = #struct_doc]
        #[derive(::core::clone::Clone, #p::serde::Serialize, #p::serde::Deserialize)]
        #[serde(crate = "::sk_runtime::__private::serde")]
        #vis struct #ty {
            #( #[doc = #field_docs] #(#field_serde)* #vis #fields: #field_tys, )*
        }

        // Debug shows the payload as it is stored (JSON per field), so it needs no more
        // of the argument types than the payload already does.
        impl ::core::fmt::Debug for #ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#ty))
                    #( .field(::core::stringify!(#fields), &#p::DebugJson(&self.#fields)) )*
                    .finish()
            }
        }

        impl #ty {
            /// Builds the job value; nothing is stored until it is enqueued.
            #[allow(clippy::too_many_arguments, clippy::new_without_default)]
            #vis fn new(#( #fields: #field_tys ),*) -> Self {
                Self { #( #fields ),* }
            }

            /// Enqueues the job with its `#[job]` defaults on a pool, a connection or
            /// inside a transaction (`&mut *tx`), and returns its id.
            ///
            /// # Errors
            /// The payload does not serialize, breaks a limit, or the database fails.
            #vis async fn enqueue<'e, E>(self, executor: E) -> ::sk_runtime::Result<#p::Uuid>
            where
                E: ::sk_runtime::Executor<'e>,
            {
                ::sk_runtime::Enqueue::new(self).enqueue(executor).await
            }

            /// Enqueues many jobs in one statement and returns their ids in order.
            ///
            /// # Errors
            /// As [`Self::enqueue`]; nothing is stored when any job is rejected.
            #vis async fn enqueue_many<'e, E, I>(executor: E, jobs: I) -> ::sk_runtime::Result<::std::vec::Vec<#p::Uuid>>
            where
                E: ::sk_runtime::Executor<'e>,
                I: ::core::iter::IntoIterator,
                I::Item: ::core::convert::Into<::sk_runtime::Enqueue<Self>>,
            {
                ::sk_runtime::Enqueue::enqueue_many(executor, jobs).await
            }

            /// Overrides the priority for this enqueue (lower runs first).
            #vis fn with_priority(self, priority: i32) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_priority(priority)
            }

            /// Runs the job no earlier than `at`.
            #vis fn run_at(self, at: #p::DateTime) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).run_at(at)
            }

            /// Runs the job no earlier than `delay` from now.
            #vis fn run_after(self, delay: #p::Duration) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).run_after(delay)
            }

            /// Puts the job on another queue for this enqueue.
            #vis fn with_queue(self, queue: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_queue(queue)
            }

            /// Records who posted the job (the seed's `task_source`).
            #vis fn with_source(self, source: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_source(source)
            }

            /// Enqueues only if no job with this key was posted before.
            #vis fn with_unique_key(self, key: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_unique_key(key)
            }

            /// What a duplicate of the unique key does (needs `with_unique_key`).
            #vis fn with_unique_mode(self, mode: ::sk_runtime::UniqueMode) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_unique_mode(mode)
            }

            /// Refuses a payload over `bytes` of JSON for this enqueue.
            #vis fn with_max_payload(self, bytes: usize) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_max_payload(bytes)
            }

            /// Enqueues the job for a tenant.
            #vis fn with_tenant(self, tenant: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_tenant(tenant)
            }

            /// Sets the job's correlation id (otherwise inherited from a running job).
            #vis fn with_correlation_id(self, id: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_correlation_id(id)
            }

            /// Attaches user metadata, a JSON object.
            #vis fn with_metadata(self, metadata: #p::serde_json::Value) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_metadata(metadata)
            }

            /// Puts the job in a retry group (seed 002): `Client::retry_group` retries them together.
            #vis fn with_retry_group(self, group: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_retry_group(group)
            }

            /// Gives the job an external string id (seed 002's), to find it by.
            #vis fn with_external_id(self, id: impl ::core::convert::Into<::std::string::String>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_external_id(id)
            }

            /// Overrides the attempt limit for this job.
            #vis fn with_max_attempts(self, attempts: i32) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_max_attempts(attempts)
            }

            /// Overrides the run-time limit for this job.
            #vis fn with_timeout(self, limit: #p::Duration) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_timeout(limit)
            }

            /// Runs the job once the jobs `ids` have succeeded, with their outputs.
            #vis fn after(self, ids: impl ::core::iter::IntoIterator<Item = #p::Uuid>) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).after(ids)
            }

            /// Enqueues into another schema/prefix than the default `public.sk_*`.
            #vis fn with_schema(self, schema: &::sk_runtime::Schema) -> ::sk_runtime::Enqueue<Self> {
                ::sk_runtime::Enqueue::new(self).with_schema(schema)
            }
        }

        impl #p::Job for #ty {
            const TASK_TYPE: &'static str = #task_type;
            const OPTIONS: ::sk_runtime::JobOptions =
                #p::options(#queue, #priority, #max_attempts, #backoff, #timeout)#encrypted;
            type Output = #job_output;
            #tenant
        }

        #accepts

        const _: () = {
            #[allow(dead_code)]
            fn __sk_assert_payload() {
                #( #payload_checks )*
            }

            fn __sk_handle(input: #p::HandlerInput) -> #p::HandlerResult {
                let __sk_job: #ty = input.decode()?;
                #( #injections )*
                #run
            }

            #args_schema

            fn __sk_requirements() -> ::std::vec::Vec<#p::Requirement> {
                #[allow(unused_mut)]
                let mut requirements = ::std::vec::Vec::new();
                #( #requirements )*
                requirements
            }

            #p::inventory::submit! {
                #p::Registration {
                    task_type: <#ty as #p::Job>::TASK_TYPE,
                    options: <#ty as #p::Job>::OPTIONS,
                    schedule: #schedule,
                    every: #every,
                    rate: #rate,
                    every_after_due: #every_after_due,
                    overlap: #overlap,
                    run_missed: #run_missed,
                    handler: __sk_handle,
                    transaction: #takes_transaction,
                    validate: #p::validate::<#ty>,
                    tenant_from: #tenant_from,
                    args_schema: __sk_args_schema,
                    requirements: __sk_requirements,
                    file: ::core::file!(),
                    line: ::core::line!(),
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pascal_case_of_fn_names() {
        let case = |s: &str| pascal_case(&Ident::new(s, Span::call_site())).to_string();
        assert_eq!(case("send_welcome"), "SendWelcome");
        assert_eq!(case("nightly_report"), "NightlyReport");
        assert_eq!(case("a"), "A");
        assert_eq!(case("fail__twice_"), "FailTwice");
    }
}
