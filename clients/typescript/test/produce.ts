// The TypeScript side of sk's cross-language test (tests/clients.rs): enqueues
// `place_order` jobs for a Rust worker and prints what it did as one JSON object.
// Usage: node --import tsx produce.ts DATABASE_URL SCHEMA_FILE

import pg from "pg";

import { Client, InvalidJob, Schema } from "../src/index.js";

const [url, schemaFile] = process.argv.slice(2) as [string, string];
const order = { shop: "typescript-shop", placed_at: "2026-11-29T10:00:00Z", lines: [] };
const conn = new pg.Client({ connectionString: url });
await conn.connect();
try {
  // One job with every option, checked against the schema file `sk schema` printed.
  const fromFile = new Client(Schema.fromFile(schemaFile));
  await conn.query("BEGIN");
  const first = await fromFile.enqueue(
    conn,
    "place_order",
    {
      order_id: 2,
      shop: "typescript-shop",
      lines: [{ sku: "A-1", qty: 3 }],
      note: "from typescript",
      gift: true,
      when: "2026-11-29T10:00:00Z",
      wrapping: { paper: "red" },
    },
    { priority: 1, uniqueKey: "typescript-order", correlationId: "typescript-1", metadata: { lang: "typescript" } },
  );
  await conn.query("COMMIT");
  // Two in one insert, checked against the schema the worker published.
  const fromDb = new Client(await Schema.fromDatabase(conn));
  const many = await fromDb.enqueueMany(
    conn,
    [20, 21].map((n) => ({ taskType: "place_order", args: { ...order, order_id: n } })),
  );
  let refused = "";
  let field: string | undefined;
  try {
    await fromDb.enqueue(conn, "place_order", { ...order, order_id: "23" });
    throw new Error("the schema took an order id that is a string");
  } catch (e) {
    if (!(e instanceof InvalidJob)) throw e;
    refused = e.message;
    field = e.field;
  }
  await conn.query("BEGIN");
  await fromDb.enqueue(conn, "place_order", { ...order, order_id: 24 });
  await conn.query("ROLLBACK");
  console.log(JSON.stringify({ ids: [first.id, ...many.map((j) => j.id)], refused, field }));
} finally {
  await conn.end();
}
