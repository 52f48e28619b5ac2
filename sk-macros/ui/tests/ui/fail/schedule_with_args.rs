use sk_runtime::{job, JobContext};

#[job(schedule = "0 * * * *")]
async fn hourly(account_id: i64, region: String, ctx: JobContext) {
    let _ = (account_id, region, ctx);
}

fn main() {}
