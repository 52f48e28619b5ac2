use sk_runtime::job;

#[job(rate = "100 per minute")]
async fn no_slash() {}

#[job(rate = "0/1s")]
async fn no_starts() {}

#[job(rate = "10/8weeks")]
async fn too_long() {}

fn main() {}
