use sk_runtime::{job, JobError};

#[job]
fn not_async(id: i64) -> Result<(), JobError> {
    let _ = id;
    Ok(())
}

fn main() {}
