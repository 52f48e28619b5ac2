use sk_runtime::job;

#[job(encrypted = true)]
async fn with_a_value(card: String) {
    let _ = card;
}

#[job(encrypted, encrypted)]
async fn twice(card: String) {
    let _ = card;
}

fn main() {}
