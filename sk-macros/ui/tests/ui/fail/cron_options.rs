use sk_runtime::job;

#[job(overlap = true)]
async fn not_scheduled() {}

#[job(schedule = "* * * * *", overlap = "yes")]
async fn wrong_literal() {}

#[job(missed = "skip")]
async fn missed_without_schedule() {}

#[job(schedule = "* * * * *", missed = "always")]
async fn unknown_policy() {}

#[job(timezone = "Europe/Paris")]
async fn zone_without_schedule() {}

fn main() {}
