use sk_runtime::{job, JobContext};

#[job]
async fn greet(name: String, #[serde(default)] ctx: JobContext) {
    let _ = (name, ctx);
}

fn main() {}
