use sk_runtime::job;

#[job(every = "10s", schedule = "* * * * *")]
async fn both() {}

#[job(every = "0s")]
async fn never() {}

#[job(every = "1m")]
async fn with_args(id: i64) {
    let _ = id;
}

fn main() {}
