use sk_runtime::job;

#[job(every = "10s", schedule = "* * * * *")]
async fn both() {}

#[job(every = "0s")]
async fn never() {}

#[job(every = "1m")]
async fn with_args(id: i64) {
    let _ = id;
}

#[job(after = "due")]
async fn after_without_every() {}

#[job(every = "1s", after = "start")]
async fn after_what() {}

fn main() {}
