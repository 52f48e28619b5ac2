use sk_runtime::job;

#[job(tenant = account)]
async fn no_such_argument(_user: u64) {}

#[job(tenant = "account")]
async fn not_a_name(_account: u64) {}

#[job(tenant = tags)]
async fn not_a_key(tags: Vec<String>) {
    drop(tags);
}

fn main() {}
