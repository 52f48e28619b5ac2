use sk_runtime::job;

#[job]
async fn generic<T: serde::Serialize>(value: T) {
    let _ = value;
}

fn main() {}
