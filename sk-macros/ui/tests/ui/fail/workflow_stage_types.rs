// A workflow stage must take what the stage before it returns: `Input<T>` after one job
// returning `T`, `Inputs<T>` after many.
use sk_runtime::{job, Input, Inputs, JobError, Workflow};

#[job]
async fn fetch(url: String) -> Result<String, JobError> {
    Ok(url)
}

#[job]
async fn count(page: Input<String>) -> Result<usize, JobError> {
    Ok(page.len())
}

#[job]
async fn total(counts: Inputs<usize>) -> Result<usize, JobError> {
    Ok(counts.iter().sum())
}

#[job]
async fn both(a: Input<String>, b: Inputs<String>) -> Result<(), JobError> {
    let _ = (a, b);
    Ok(())
}

fn main() {
    // Right: one fetch, then its page counted; many counts, then summed.
    let _ = Workflow::start(Fetch::new("a".into())).then(Count::new());
    let _ = Workflow::fan_out(vec![Count::new()]).then(Total::new());
    // Wrong: `total` takes numbers, `fetch` returns text.
    let _ = Workflow::start(Fetch::new("a".into())).then(Total::new());
    // Wrong: `count` takes the output of one job, and follows many.
    let _ = Workflow::fan_out(vec![Fetch::new("a".into())]).then(Count::new());
}
