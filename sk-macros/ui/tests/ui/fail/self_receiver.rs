use sk_runtime::job;

struct Mailer;

impl Mailer {
    #[job]
    async fn send(&self, to: String) {
        let _ = to;
    }
}

fn main() {}
