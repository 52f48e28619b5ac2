use sk_runtime::job;

#[job(queue = "mail", retries = 3)]
async fn unknown_key() {}

fn main() {}
