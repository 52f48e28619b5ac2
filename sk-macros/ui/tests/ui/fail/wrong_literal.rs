use sk_runtime::job;

#[job(priority = "high", max_attempts = 0, timeout = 30, backoff = "sometimes", queue = "")]
async fn wrong_literal() {}

fn main() {}
