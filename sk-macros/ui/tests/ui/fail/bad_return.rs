use sk_runtime::job;

#[job]
async fn returns_a_number() -> u32 {
    7
}

fn main() {}
