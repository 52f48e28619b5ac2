use sk_runtime::job;

#[job(priority = 1, queue = "a", priority = 2)]
async fn duplicate_key() {}

fn main() {}
