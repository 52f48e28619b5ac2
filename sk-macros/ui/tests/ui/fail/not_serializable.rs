use sk_runtime::job;

struct Connection;

#[job]
async fn uses_connection(id: i64, conn: Connection) {
    let _ = (id, conn);
}

fn main() {}
