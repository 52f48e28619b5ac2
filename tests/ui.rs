//! Compile-time behaviour of `#[job]`: accepted shapes compile, each rejected input fails
//! with its own spanned error.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
