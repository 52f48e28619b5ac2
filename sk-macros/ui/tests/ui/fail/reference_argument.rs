use sk_runtime::{job, JobError};

#[job]
async fn borrows(name: &String) -> Result<(), JobError> {
    let _ = name;
    Ok(())
}

#[job]
async fn two_transactions(
    a: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    b: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<(), JobError> {
    let _ = (a, b);
    Ok(())
}

fn main() {}
