use sk_runtime::job;

#[job(overlap = true)]
async fn not_scheduled() {}

#[job(schedule = "* * * * *", overlap = "yes")]
async fn wrong_literal() {}

fn main() {}
