//! Compile-time behaviour of `#[job]`: each rejected input fails with its own spanned error
//! (trybuild, `ui/fail/`), and the accepted shapes compile and behave (`ui/pass/`, built into
//! this test binary rather than by trybuild: trybuild checks the failures with `cargo check`
//! alone, where one passing case would make it build every dependency again).
//!
//! Here rather than in sk-tests: trybuild's project takes this crate's dev-dependencies,
//! sk-runtime on PostgreSQL alone, where sk-tests' would have it check the CLI, the
//! dashboard and all three backends (168 s of CI against 82 s).

#[allow(unreachable_pub, clippy::unwrap_used)]
#[path = "ui/pass/every_key.rs"]
mod every_key;
#[allow(unreachable_pub, clippy::unwrap_used)]
#[path = "ui/pass/evolving_args.rs"]
mod evolving_args;
#[allow(unreachable_pub, clippy::unwrap_used)]
#[path = "ui/pass/workflow.rs"]
mod workflow;

#[test]
fn accepted_shapes_compile_and_behave() {
    every_key::main();
    evolving_args::main();
    workflow::main();
}

#[test]
fn rejected_inputs_fail_with_their_own_errors() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail/*.rs");
}
