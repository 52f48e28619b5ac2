// The TypeScript client against a real PostgreSQL with sk's tables (made by `sk migrate`):
// the rows it writes are sk's, a payload the schema refuses is refused naming the field and
// never stored, and everything happens inside the caller's transaction.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import pg from "pg";

import { Client, InvalidJob, Schema, SkError, uuid7 } from "../src/index.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const schemaFile = join(root, "clients", "testdata", "sk-schema.json");
const server = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

const ORDER = {
  order_id: 42,
  shop: "acme",
  lines: [{ sku: "A-1", qty: 2 }],
  placed_at: "2026-11-29T10:00:00Z",
};

/** sk's command (target/debug/sk, or $SK_BIN), built where it is missing. */
function skCommand(): string {
  const path = process.env.SK_BIN ?? join(root, "target", "debug", "sk");
  if (!existsSync(path)) {
    execFileSync("cargo", ["build", "--locked", "-p", "sk-cli", "--bin", "sk"], { cwd: root, stdio: "inherit" });
  }
  return path;
}

/** A database of its own with sk's tables, per test; dropped after it. */
let url = "";
let name = "";
const admin = new pg.Client({ connectionString: server });
const open: pg.Client[] = [];

async function connect(): Promise<pg.Client> {
  const conn = new pg.Client({ connectionString: url });
  await conn.connect();
  open.push(conn);
  return conn;
}

async function queued(conn: pg.ClientBase) {
  const { rows } = await conn.query(
    `SELECT task_id::text AS id, task_type, task_source, task_payload, task_priority, task_queue,
        task_max_attempts, task_tenant, task_correlation_id, task_metadata, task_unique_key, task_unique_mode,
        extract(epoch FROM task_locked_until_ts - task_posted_at_ts)::float8 AS delay_s
     FROM sk_tasks_queue_t ORDER BY task_lock_handle_id`,
  );
  return rows;
}

before(async () => {
  await admin.connect();
});

beforeEach(async () => {
  while (open.length > 0) await open.pop()!.end();
  if (name) await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  name = `sk_ts_${randomBytes(6).toString("hex")}`;
  await admin.query(`CREATE DATABASE "${name}"`);
  url = `${server.slice(0, server.lastIndexOf("/"))}/${name}`;
  execFileSync(skCommand(), ["--database-url", url, "migrate"], { stdio: "pipe" });
});

after(async () => {
  while (open.length > 0) await open.pop()!.end();
  if (name) await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  await admin.end();
});

describe("the TypeScript client", () => {
  const client = new Client(Schema.fromFile(schemaFile));

  test("one job is sk's row and wakes the workers at commit", async () => {
    const listener = await connect();
    const woken: string[] = [];
    listener.on("notification", (n) => woken.push(n.channel));
    const first = new Promise((resolve) => listener.once("notification", resolve));
    await listener.query(`LISTEN ${client.channel}`);
    const conn = await connect();
    await conn.query("BEGIN");
    const job = await client.enqueue(conn, "place_order", ORDER, {
      delayMs: 30_000,
      correlationId: "req-7",
      metadata: { from: "next" },
    });
    assert.equal(job.outcome, "inserted");
    assert.equal(job.id[14], "7");
    assert.deepEqual(await queued(await connect()), [], "visible before the caller's commit");
    // The notification comes with the commit, not before: a round trip on the listener
    // before it is there proves nothing had come.
    await listener.query("SELECT 1");
    assert.deepEqual(woken, []);
    await conn.query("COMMIT");
    await first;
    assert.deepEqual(woken, ["sk_task_queue_item_added"]);
    const [row] = await queued(conn);
    assert.equal(row.id, job.id);
    assert.deepEqual(JSON.parse(row.task_payload), ORDER);
    // The job's #[job] defaults from the schema, and its tenant from its `shop` argument.
    assert.deepEqual(
      [row.task_type, row.task_source, row.task_priority, row.task_queue, row.task_max_attempts, row.task_tenant],
      ["place_order", "app", 3, "orders", 4, "acme"],
    );
    assert.deepEqual([row.task_correlation_id, row.task_metadata, row.task_unique_key], ["req-7", { from: "next" }, null]);
    assert.equal(row.delay_s, 30);
  });

  test("a refused payload names its field and stores nothing", async () => {
    const conn = await connect();
    const { placed_at: _, ...withoutTime } = ORDER;
    const { shop: __, ...withoutShop } = ORDER;
    const cases: [Record<string, unknown>, string, string][] = [
      [{ ...ORDER, order_id: "42" }, "order_id", "must be integer"],
      [withoutShop, "shop", "missing"],
      [{ ...ORDER, lines: [{ sku: "A-1", qty: -1 }] }, "lines.0.qty", "must be >= 0"],
      [withoutTime, "placed_at", "also accepted as when"],
    ];
    for (const [args, field, words] of cases) {
      await assert.rejects(client.enqueue(conn, "place_order", args), (e: unknown) => {
        assert.ok(e instanceof InvalidJob, String(e));
        assert.equal(e.field, field, e.message);
        assert.ok(e.message.includes(words) && e.message.includes(`'${field}'`), e.message);
        return true;
      });
    }
    // The alias is accepted, and a batch with one bad job stores none of them.
    const when = { ...withoutTime, when: "2026-11-29T10:00:00Z" };
    await assert.rejects(
      client.enqueueMany(conn, [
        { taskType: "place_order", args: when },
        { taskType: "place_order", args: { ...ORDER, gift: "yes" } },
      ]),
      InvalidJob,
    );
    assert.deepEqual(await queued(conn), []);
    await client.enqueue(conn, "place_order", when);
    assert.equal((await queued(conn)).length, 1);
  });

  test("options are checked as sk checks them", async () => {
    const conn = await connect();
    const bad: [Record<string, unknown>, string][] = [
      [{ queue: "" }, "queue"],
      [{ tenant: "t".repeat(256) }, "tenant"],
      [{ priority: 2 ** 31 }, "priority"],
      [{ maxAttempts: 0 }, "maxAttempts"],
      [{ uniqueMode: "replace" }, "uniqueMode"],
      [{ uniqueKey: "k", uniqueMode: "sometimes" }, "uniqueMode"],
      [{ metadata: ["not", "an", "object"] }, "metadata"],
      [{ metadata: { a: "nul\0" } }, "metadata"],
      [{ delayMs: -1 }, "delayMs"],
      [{ runAt: new Date("nope") }, "runAt"],
    ];
    for (const [options, field] of bad) {
      await assert.rejects(client.enqueue(conn, "place_order", ORDER, options), (e: unknown) => {
        assert.ok(e instanceof InvalidJob && e.field === field, `${JSON.stringify(options)}: ${e}`);
        return true;
      });
    }
    await assert.rejects(
      client.enqueue(conn, "nope", {}),
      /no job named 'nope' in the schema \(known: place_order, sealed_note\)/,
    );
    await assert.rejects(client.enqueue(conn, "sealed_note", { text: "hi" }), /encrypted/);
    await assert.rejects(
      new Client(client.schema, { maxPayload: 100 }).enqueue(conn, "place_order", { ...ORDER, note: "x".repeat(100) }),
      /over the limit of 100/,
    );
    assert.deepEqual(await queued(conn), []);
  });

  test("many jobs go in one insert, in order", async () => {
    const conn = await connect();
    const at = new Date("2030-01-01T00:00:00Z");
    const done = await client.enqueueMany(
      conn,
      [0, 1, 2, 3, 4].map((n) => ({
        taskType: "place_order",
        args: { ...ORDER, order_id: n },
        priority: n,
        ...(n === 2 ? { runAt: at } : {}),
      })),
    );
    const rows = await queued(conn);
    assert.deepEqual(
      rows.map((r) => r.id),
      done.map((d) => d.id),
    );
    assert.deepEqual(
      rows.map((r) => [JSON.parse(r.task_payload).order_id, r.task_priority]),
      [0, 1, 2, 3, 4].map((n) => [n, n]),
    );
    const { rows: locked } = await conn.query("SELECT task_locked_until_ts AS t FROM sk_tasks_queue_t WHERE task_id = $1", [
      done[2]!.id,
    ]);
    assert.equal(locked[0].t.getTime(), at.getTime());
    assert.deepEqual(await client.enqueueMany(conn, []), []);
  });

  test("unique keys skip, replace and restart", async () => {
    const conn = await connect();
    const first = await client.enqueue(conn, "place_order", ORDER, { uniqueKey: "order-42" });
    const again = await client.enqueue(conn, "place_order", { ...ORDER, gift: true }, { uniqueKey: "order-42" });
    assert.equal(first.outcome, "inserted");
    assert.deepEqual(again, { id: first.id, outcome: "duplicate" });
    const replaced = await client.enqueue(conn, "place_order", { ...ORDER, gift: true }, {
      uniqueKey: "order-42",
      uniqueMode: "replace",
    });
    assert.deepEqual(replaced, { id: first.id, outcome: "updated" });
    const mixed = await client.enqueueMany(conn, [
      { taskType: "place_order", args: ORDER },
      { taskType: "place_order", args: ORDER, uniqueKey: "order-42" },
    ]);
    assert.equal(mixed[0]!.outcome, "inserted");
    assert.deepEqual(mixed[1], { id: first.id, outcome: "duplicate" });
    const { rows } = await conn.query(
      "SELECT task_payload, task_unique_key, task_unique_mode FROM sk_tasks_queue_t WHERE task_id = $1",
      [first.id],
    );
    assert.equal(JSON.parse(rows[0].task_payload).gift, true);
    assert.deepEqual([rows[0].task_unique_key, rows[0].task_unique_mode], ["order-42", 1]);
    // As sk's own enqueue: a keyed job has its results row (waiting) from the start.
    const { rows: results } = await conn.query("SELECT task_status FROM sk_task_results_t WHERE task_id = $1", [first.id]);
    assert.deepEqual(results, [{ task_status: 1 }]);
  });

  test("a rolled-back transaction leaves nothing; a pool commits on its own", async () => {
    const conn = await connect();
    await conn.query("BEGIN");
    await client.enqueue(conn, "place_order", ORDER);
    await client.enqueue(conn, "place_order", ORDER, { uniqueKey: "k" });
    await conn.query("ROLLBACK");
    assert.deepEqual(await queued(conn), []);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const done = await client.enqueueMany(pool, [
        { taskType: "place_order", args: ORDER },
        { taskType: "place_order", args: ORDER, uniqueKey: "k" },
      ]);
      assert.deepEqual(
        (await queued(conn)).map((r) => r.id),
        done.map((d) => d.id),
      );
    } finally {
      await pool.end();
    }
  });

  test("the schema from the database, and bad documents", async () => {
    const conn = await connect();
    const document = JSON.parse(readFileSync(schemaFile, "utf8"));
    await conn.query("INSERT INTO sk_task_types_t VALUES ('place_order', $1, 'worker-1', now())", [
      JSON.stringify(document.jobs.place_order),
    ]);
    const schema = await Schema.fromDatabase(conn);
    assert.deepEqual(Object.keys(schema.jobs), ["place_order"]);
    await new Client(schema).enqueue(conn, "place_order", ORDER);
    await assert.rejects(new Client(schema).enqueue(conn, "place_order", { ...ORDER, order_id: 1.5 }), /'order_id'/);
    assert.throws(() => Schema.fromObject({ format: "sk-schema/9", jobs: {} }), SkError);
    assert.throws(() => Schema.fromObject({ format: "sk-schema/1" }), /no `jobs` object/);
  });

  test("ids are UUIDv7 in time order", () => {
    const ids = Array.from({ length: 1000 }, () => uuid7());
    assert.equal(new Set(ids).size, 1000);
    for (const id of ids) assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const stamps = ids.map((id) => id.slice(0, 13));
    assert.deepEqual(stamps, [...stamps].sort());
  });
});
