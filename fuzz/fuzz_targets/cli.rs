//! The `sk` command's arguments are outside input: filters (queue, type, tenant, metadata,
//! state), durations (`--since`, `--older-than`), ids and limits. The fuzzer's bytes, split
//! at NUL, are the arguments of a run against a seeded SQLite database; whatever they are,
//! the command must end with one of its documented exit codes (0, 1, 2, 3) and print no
//! control character but a line break (outside text stays inert in a terminal) -- never
//! panic.
#![no_main]

#[path = "seeded.rs"]
mod seeded;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (url, _) = seeded::database();
    let given: Vec<String> = data
        .split(|b| *b == 0)
        .take(12)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    // `web` serves until the process ends, and the database is the harness's to choose.
    if given
        .iter()
        .any(|a| a == "web" || a.starts_with("--database-url"))
    {
        return;
    }
    let args = ["sk", "--database-url", url.as_str()]
        .into_iter()
        .map(str::to_owned)
        .chain(given.iter().cloned());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = seeded::runtime().block_on(sk_cli::run(args, &mut out, &mut err));
    assert!(code <= 3, "{given:?}: exit code {code}");
    for (name, bytes) in [("stdout", &out), ("stderr", &err)] {
        let text = String::from_utf8_lossy(bytes);
        if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\n') {
            panic!("{given:?}: {name} holds control character {c:?}:\n{text}");
        }
    }
});
