// Enqueue sk jobs from TypeScript, on PostgreSQL (node-postgres).
//
// Insert-only, like River's clients: a Rust worker runs the jobs. Each payload is checked
// against the JSON Schema of the job's arguments that sk derives from the Rust `#[job]` fn
// (`sk schema`, or the schemas the workers published in the database) before anything is
// stored, and the error names the field. The rows and the NOTIFY are the ones sk's own
// enqueue writes (docs/clients.md in sk's repository).

import { randomFillSync } from "node:crypto";
import { readFileSync } from "node:fs";

import { Ajv2020 } from "ajv/dist/2020.js";
import type { ErrorObject, ValidateFunction } from "ajv";
import pg from "pg";

/** The schema document's format this client reads (`sk_runtime::SCHEMA_FORMAT`). */
export const SCHEMA_FORMAT = "sk-schema/1";
/** The largest payload sk's enqueue takes by default, in bytes of JSON. */
export const MAX_PAYLOAD_BYTES = 1024 * 1024;
/** The longest name (task type, queue, tenant, key, ...) sk stores, in bytes of UTF-8. */
export const MAX_NAME_BYTES = 255;
/** Unique modes as sk stores them (`UniqueMode`). */
export const UNIQUE_MODES = { skip: 1, restart: 2, replace: 3 } as const;
export type UniqueMode = keyof typeof UNIQUE_MODES;

/** A job sk would refuse, or a schema document this client cannot read. */
export class SkError extends Error {
  override name = "SkError";
}

/** A job refused before anything was stored: `field` names the argument (dotted for a
 * nested one) or the option at fault, where there is one. */
export class InvalidJob extends SkError {
  override name = "InvalidJob";
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/** One job's entry in the schema document: its `#[job]` defaults and `args`. */
export interface JobSchema {
  queue: string;
  priority: number;
  max_attempts: number;
  timeout_ms: number | null;
  encrypted: boolean;
  schedule: string | null;
  every_ms: number | null;
  tenant_from: string | null;
  args: Record<string, unknown>;
  [more: string]: unknown;
}

/** The options of one enqueue; each left out takes the job's `#[job]` default. */
export interface EnqueueOptions {
  queue?: string;
  priority?: number;
  /** Runs no earlier than this many milliseconds from now. */
  delayMs?: number;
  /** Runs no earlier than this instant. */
  runAt?: Date;
  maxAttempts?: number;
  uniqueKey?: string;
  /** What a duplicate key does: `skip` (default), `replace` or `restart`. */
  uniqueMode?: UniqueMode;
  tenant?: string;
  correlationId?: string;
  metadata?: Record<string, unknown>;
  /** Who posted the job (the seed's `task_source`); `app` by default. */
  source?: string;
}

/** One job of `enqueueMany`. */
export interface Job extends EnqueueOptions {
  taskType: string;
  args: Record<string, unknown>;
}

/** The job an enqueue stored or found: the new job's id, or that of the live job holding
 * the unique key. */
export interface Enqueued {
  id: string;
  outcome: "inserted" | "duplicate" | "updated" | "rerun_scheduled";
}

/** Where statements run: a pool (the client takes one of its connections, in a
 * transaction of its own) or a connection (in the caller's transaction, if it began one). */
export type Queryable = pg.Pool | pg.ClientBase;

/** The schema document of sk's jobs (`sk schema`): per task type its defaults and the
 * JSON Schema of its arguments. */
export class Schema {
  private readonly validators = new Map<string, ValidateFunction>();
  private readonly ajv = new Ajv2020({ strict: false, validateFormats: false });

  constructor(readonly jobs: Record<string, JobSchema>) {}

  static fromObject(document: unknown): Schema {
    const doc = document as { format?: unknown; jobs?: unknown } | null;
    if (typeof doc !== "object" || doc === null || doc.format !== SCHEMA_FORMAT) {
      throw new SkError(
        `not an sk schema document of format '${SCHEMA_FORMAT}' (found ${JSON.stringify(doc?.format ?? null)})`,
      );
    }
    if (typeof doc.jobs !== "object" || doc.jobs === null) {
      throw new SkError("the schema document has no `jobs` object");
    }
    return new Schema(doc.jobs as Record<string, JobSchema>);
  }

  /** The document `sk schema` printed, checked into the producer's repository. */
  static fromFile(path: string): Schema {
    return Schema.fromObject(JSON.parse(readFileSync(path, "utf8")));
  }

  /** What the running workers published at start (their `task_types_t` rows). */
  static async fromDatabase(
    db: Queryable,
    { dbSchema = "public", prefix = "sk_" }: { dbSchema?: string; prefix?: string } = {},
  ): Promise<Schema> {
    const table = `${ident(dbSchema)}.${ident(`${prefix}task_types_t`)}`;
    const { rows } = await db.query(`SELECT type_name, type_schema FROM ${table} ORDER BY type_name`);
    const jobs: Record<string, JobSchema> = {};
    for (const row of rows) jobs[row.type_name] = JSON.parse(row.type_schema);
    return new Schema(jobs);
  }

  /** The entry of `taskType`. */
  job(taskType: string): JobSchema {
    const entry = Object.hasOwn(this.jobs, taskType) ? this.jobs[taskType] : undefined;
    if (entry === undefined) {
      const known = Object.keys(this.jobs).sort().join(", ") || "none";
      throw new InvalidJob(`no job named '${taskType}' in the schema (known: ${known})`, "taskType");
    }
    return entry;
  }

  /** Throws {@link InvalidJob}, naming the field, when `args` do not fit the job's arguments. */
  check(taskType: string, args: unknown): void {
    const entry = this.job(taskType);
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      throw new InvalidJob(`${taskType}: the arguments must be a JSON object`);
    }
    let validate = this.validators.get(taskType);
    if (validate === undefined) {
      validate = this.ajv.compile(entry.args);
      this.validators.set(taskType, validate);
    }
    if (!validate(args)) {
      const [at, message] = describe(validate.errors ?? []);
      const where = at ? `field '${at}': ` : "";
      throw new InvalidJob(`${taskType}: ${where}${message}`, at || undefined);
    }
  }
}

/** The field a validation failure is about, and what is wrong with it. */
function describe(errors: ErrorObject[]): [string, string] {
  const first = errors[0];
  if (first === undefined) return ["", "does not fit the schema"];
  const path = first.instancePath.split("/").slice(1).join(".");
  const join = (name: string) => (path ? `${path}.${name}` : name);
  if (first.keyword === "required") {
    const missing = String(first.params.missingProperty);
    const anyOf = first.schemaPath.match(/^(.*\/anyOf)\/\d+\/required$/);
    if (anyOf) {
      const names = errors
        .filter((e) => e.keyword === "required" && e.schemaPath.startsWith(`${anyOf[1]}/`))
        .map((e) => String(e.params.missingProperty));
      return [join(names[0] ?? missing), `missing (a required argument, also accepted as ${names.slice(1).join(", ")})`];
    }
    return [join(missing), "missing (a required argument)"];
  }
  return [path, first.message ?? "does not fit the schema"];
}

/** A UUIDv7 (time-ordered), as sk's own job ids. */
export function uuid7(): string {
  const bytes = randomFillSync(new Uint8Array(16));
  let ms = Date.now();
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = 0x70 | (bytes[6]! & 0x0f);
  bytes[8] = 0x80 | (bytes[8]! & 0x3f);
  const hex = Buffer.from(bytes).toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

function checkName(what: string, value: string | undefined | null): void {
  if (value === undefined || value === null) return;
  if (typeof value !== "string" || value === "") throw new InvalidJob(`${what} must be a non-empty string`, what);
  const bytes = Buffer.byteLength(value, "utf8");
  if (bytes > MAX_NAME_BYTES) {
    throw new InvalidJob(`${what} is ${bytes} bytes, over the limit of ${MAX_NAME_BYTES}`, what);
  }
}

function hasNul(value: unknown): boolean {
  if (typeof value === "string") return value.includes("\0");
  if (Array.isArray(value)) return value.some(hasNul);
  if (typeof value === "object" && value !== null) {
    return Object.entries(value).some(([k, v]) => k.includes("\0") || hasNul(v));
  }
  return false;
}

const QUEUE_COLUMNS = `task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result,
    task_tenant, task_correlation_id, task_metadata`;

// sk's `enqueue_many`: queue rows alone (a job's results row comes with its first
// outcome), in the caller's order.
const INSERT_MANY = (q: string) => `INSERT INTO ${q} (${QUEUE_COLUMNS})
SELECT i.id, i.type, i.source, i.payload, i.priority, now(),
    coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond'),
    i.queue, i.max_attempts, false, i.tenant, i.correlation_id, i.metadata::jsonb
FROM unnest($1::uuid[], $2::varchar[], $3::varchar[], $4::text[], $5::int4[], $6::timestamptz[],
    $7::int8[], $8::varchar[], $9::int4[], $10::varchar[], $11::varchar[], $12::text[])
    AS i(id, type, source, payload, priority, run_at, delay_ms, queue, max_attempts, tenant,
        correlation_id, metadata)`;

// sk's `enqueue_unique`: a live job holding the key is left alone (skip), takes the new
// payload and run-at time while it waits (replace), or takes the payload and runs once
// more after a running attempt (restart); a new job gets its results row at once.
const INSERT_UNIQUE = (q: string, r: string) => `WITH q AS (
    INSERT INTO ${q} AS q (${QUEUE_COLUMNS}, task_unique_key, task_unique_mode)
    VALUES ($1, $2, $3, $4, $5, now(),
        coalesce($6::timestamptz, now() + $7::int8 * interval '1 millisecond'),
        $8, $9, true, $10, $11, $12::jsonb, $13, $14)
    ON CONFLICT (task_unique_key) WHERE task_unique_key IS NOT NULL DO UPDATE SET
        task_payload = CASE WHEN ($14 = 3 AND q.task_locked_by IS NULL) OR $14 = 2
            THEN EXCLUDED.task_payload ELSE q.task_payload END,
        task_locked_until_ts = CASE WHEN $14 = 3 AND q.task_locked_by IS NULL
            THEN EXCLUDED.task_locked_until_ts ELSE q.task_locked_until_ts END,
        task_rerun = q.task_rerun OR ($14 = 2 AND q.task_locked_by IS NOT NULL)
    RETURNING q.task_id, q.xmax = 0 AS inserted, q.task_locked_by IS NOT NULL AS running
), res AS (
    INSERT INTO ${r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
        task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id,
        task_metadata)
    SELECT $1, $2, $3, $8, 1, $5, $13, $14::int2, now(), $10, $11, $12::jsonb
    FROM q WHERE q.inserted
)
SELECT task_id::text AS id, inserted, running FROM q`;

interface Row {
  id: string;
  type: string;
  source: string;
  payload: string;
  priority: number;
  runAt: Date | null;
  delayMs: number;
  queue: string;
  maxAttempts: number;
  tenant: string | null;
  correlationId: string | null;
  metadata: string | null;
  key: string | null;
  mode: number | null;
}

/** Enqueues jobs checked against `schema` into sk's tables in `dbSchema` with `prefix`
 * (sk's defaults: `public` and `sk_`), inside the caller's transaction: nothing is
 * visible, and no worker is woken, until the caller commits. */
export class Client {
  readonly channel: string;
  private readonly queue: string;
  private readonly results: string;
  private readonly maxPayload: number;

  constructor(
    readonly schema: Schema,
    { dbSchema = "public", prefix = "sk_", maxPayload = MAX_PAYLOAD_BYTES }: {
      dbSchema?: string;
      prefix?: string;
      maxPayload?: number;
    } = {},
  ) {
    this.queue = `${ident(dbSchema)}.${ident(`${prefix}tasks_queue_t`)}`;
    this.results = `${ident(dbSchema)}.${ident(`${prefix}task_results_t`)}`;
    this.maxPayload = maxPayload;
    // sk's wake-up channel (`Schema::channel`).
    this.channel =
      dbSchema === "public" ? `${prefix}task_queue_item_added` : `${dbSchema}_${prefix}task_queue_item_added`;
  }

  /** Enqueues one job. */
  async enqueue(
    db: Queryable,
    taskType: string,
    args: Record<string, unknown>,
    options: EnqueueOptions = {},
  ): Promise<Enqueued> {
    const [done] = await this.enqueueMany(db, [{ ...options, taskType, args }]);
    return done!;
  }

  /** Enqueues the jobs in one multi-row insert (those with a unique key one at a time, in
   * the same transaction); returns what each did, in order. Every job is checked first:
   * when one is refused, nothing is stored. */
  async enqueueMany(db: Queryable, jobs: Job[]): Promise<Enqueued[]> {
    const rows = jobs.map((job) => this.row(job));
    if (rows.length === 0) return [];
    if (db instanceof pg.Pool) {
      const conn = await db.connect();
      try {
        await conn.query("BEGIN");
        const done = await this.insert(conn, rows);
        await conn.query("COMMIT");
        return done;
      } catch (e) {
        await conn.query("ROLLBACK").catch(() => undefined);
        throw e;
      } finally {
        conn.release();
      }
    }
    return this.insert(db, rows);
  }

  private async insert(db: pg.ClientBase, rows: Row[]): Promise<Enqueued[]> {
    const out: Enqueued[] = new Array(rows.length);
    const plain = rows.map((row, at) => [at, row] as const).filter(([, row]) => row.key === null);
    if (plain.length > 0) {
      const column = <K extends keyof Row>(k: K) => plain.map(([, row]) => row[k]);
      await db.query(INSERT_MANY(this.queue), [
        column("id"),
        column("type"),
        column("source"),
        column("payload"),
        column("priority"),
        column("runAt"),
        column("delayMs"),
        column("queue"),
        column("maxAttempts"),
        column("tenant"),
        column("correlationId"),
        column("metadata"),
      ]);
      for (const [at, row] of plain) out[at] = { id: row.id, outcome: "inserted" };
    }
    for (const [at, row] of rows.entries()) {
      if (row.key === null) continue;
      const { rows: found } = await db.query(INSERT_UNIQUE(this.queue, this.results), [
        row.id,
        row.type,
        row.source,
        row.payload,
        row.priority,
        row.runAt,
        row.delayMs,
        row.queue,
        row.maxAttempts,
        row.tenant,
        row.correlationId,
        row.metadata,
        row.key,
        row.mode,
      ]);
      const { id, inserted, running } = found[0];
      out[at] = { id, outcome: outcome(inserted, row.mode!, running) };
    }
    await db.query("SELECT pg_notify($1, '')", [this.channel]);
    return out;
  }

  private row(job: Job): Row {
    const entry = this.schema.job(job.taskType);
    checkName("taskType", job.taskType);
    if (entry.encrypted) {
      throw new InvalidJob(
        `${job.taskType} is #[job(encrypted)]: its arguments are sealed with the workers' keys, which this client does not hold; enqueue it from Rust`,
        "taskType",
      );
    }
    this.schema.check(job.taskType, job.args);
    const payload = JSON.stringify(job.args);
    const bytes = Buffer.byteLength(payload, "utf8");
    if (bytes > this.maxPayload) {
      throw new InvalidJob(
        `${job.taskType}: the payload is ${bytes} bytes of JSON, over the limit of ${this.maxPayload}`,
        "args",
      );
    }
    const queue = job.queue ?? entry.queue ?? "default";
    const priority = job.priority ?? entry.priority ?? 0;
    const maxAttempts = job.maxAttempts ?? entry.max_attempts ?? 25;
    const source = job.source ?? "app";
    let tenant = job.tenant ?? null;
    const from = entry.tenant_from ? job.args[entry.tenant_from] : undefined;
    if (tenant === null && (typeof from === "string" || typeof from === "number")) tenant = String(from);
    for (const [what, value] of [
      ["queue", queue],
      ["source", source],
      ["tenant", tenant],
      ["correlationId", job.correlationId],
      ["uniqueKey", job.uniqueKey],
    ] as const) {
      checkName(what, value);
    }
    if (!Number.isInteger(priority) || priority < -(2 ** 31) || priority >= 2 ** 31) {
      throw new InvalidJob(`priority must be a 32-bit integer, not ${priority}`, "priority");
    }
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts >= 2 ** 31) {
      throw new InvalidJob(`maxAttempts must be at least 1, not ${maxAttempts}`, "maxAttempts");
    }
    if (job.uniqueMode !== undefined && job.uniqueKey === undefined) {
      throw new InvalidJob("uniqueMode needs a uniqueKey", "uniqueMode");
    }
    let mode: number | null = null;
    if (job.uniqueKey !== undefined) {
      const name = job.uniqueMode ?? "skip";
      if (!Object.hasOwn(UNIQUE_MODES, name)) {
        throw new InvalidJob(
          `uniqueMode must be one of ${Object.keys(UNIQUE_MODES).join(", ")}, not '${name}'`,
          "uniqueMode",
        );
      }
      mode = UNIQUE_MODES[name];
    }
    let metadata: string | null = null;
    if (job.metadata !== undefined) {
      if (typeof job.metadata !== "object" || job.metadata === null || Array.isArray(job.metadata)) {
        throw new InvalidJob("metadata must be a JSON object", "metadata");
      }
      if (hasNul(job.metadata)) {
        throw new InvalidJob("metadata must not hold a NUL character (PostgreSQL's jsonb cannot)", "metadata");
      }
      metadata = JSON.stringify(job.metadata);
    }
    if (job.runAt !== undefined && job.delayMs !== undefined) {
      throw new InvalidJob("give delayMs or runAt, not both", "runAt");
    }
    if (job.runAt !== undefined && !(job.runAt instanceof Date && !Number.isNaN(job.runAt.getTime()))) {
      throw new InvalidJob("runAt must be a valid Date", "runAt");
    }
    const delayMs = job.delayMs ?? 0;
    if (!Number.isFinite(delayMs) || delayMs < 0) {
      throw new InvalidJob(`delayMs must not be negative, not ${delayMs}`, "delayMs");
    }
    return {
      id: uuid7(),
      type: job.taskType,
      source,
      payload,
      priority,
      runAt: job.runAt ?? null,
      delayMs: Math.round(delayMs),
      queue,
      maxAttempts,
      tenant,
      correlationId: job.correlationId ?? null,
      metadata,
      key: job.uniqueKey ?? null,
      mode,
    };
  }
}

function outcome(inserted: boolean, mode: number, running: boolean): Enqueued["outcome"] {
  if (inserted) return "inserted";
  if (mode === UNIQUE_MODES.restart && running) return "rerun_scheduled";
  if ((mode === UNIQUE_MODES.restart || mode === UNIQUE_MODES.replace) && !running) return "updated";
  return "duplicate";
}
