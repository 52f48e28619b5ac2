use sk_runtime::job;

#[job(schedule = "0 0 25 * * *")]
async fn bad_hour() {}

#[job(schedule = "every day")]
async fn not_cron() {}

fn main() {}
