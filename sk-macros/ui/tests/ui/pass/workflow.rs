// Workflows type-check stage by stage: the seed 003 pipeline, a fan-out/fan-in, and a
// stage that only waits.
use sk_runtime::{job, Input, Inputs, JobError, Workflow};

#[job(queue = "fetch")]
async fn fetch(url: String) -> Result<String, JobError> {
    Ok(url)
}

#[job(queue = "parse")]
async fn parse(page: Input<String>) -> Result<Vec<String>, JobError> {
    Ok(vec![page.into_inner()])
}

#[job(queue = "store")]
async fn store(links: Input<Vec<String>>) -> Result<(), JobError> {
    let _ = links;
    Ok(())
}

#[job]
async fn sum(parts: Inputs<Vec<String>>) -> Result<usize, JobError> {
    Ok(parts.iter().map(Vec::len).sum())
}

#[job]
async fn notify() {}

pub fn main() {
    let _pipeline = Workflow::start(Fetch::new("https://example.com".into()))
        .then(Parse::new())
        .then(Store::new())
        .then(Notify::new());
    let _fan_in = Workflow::fan_out(["a", "b"].map(|u| Fetch::new(u.into())))
        .then_fan_out(vec![Notify::new()])
        .then(Notify::new());
    let _sum = Workflow::start(Fetch::new("a".into()))
        .then_fan_out(vec![Parse::new(), Parse::new()])
        .then(Sum::new());
    let _: fn() -> sk_runtime::Enqueue<Notify> =
        || Notify::new().after([sk_runtime::__private::Uuid::nil()]);
}
