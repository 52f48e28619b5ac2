"""Enqueue sk jobs from Python, on PostgreSQL.

Insert-only, like River's clients: a Rust worker runs the jobs. Each payload is checked
against the JSON Schema of the job's arguments that sk derives from the Rust ``#[job]``
fn (``sk schema``, or the schemas the workers published in the database) before anything
is stored, and the error names the field. The rows and the ``NOTIFY`` are the ones sk's
own enqueue writes (docs/clients.md in sk's repository).

    schema = sk_client.Schema.from_file("sk-schema.json")
    with psycopg.connect(url) as conn:
        sk_client.Client(schema).enqueue(conn, "send_welcome", {"user_id": 42})
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Optional, Union

import jsonschema
from psycopg import sql

__all__ = ["Client", "Enqueued", "InvalidJob", "Job", "Schema", "SkError", "uuid7"]

#: The schema document's format this client reads (``sk_runtime::SCHEMA_FORMAT``).
SCHEMA_FORMAT = "sk-schema/1"
#: The largest payload sk's enqueue takes by default, in bytes of JSON.
MAX_PAYLOAD_BYTES = 1024 * 1024
#: The longest name (task type, queue, tenant, key, ...) sk stores, in bytes of UTF-8.
MAX_NAME_BYTES = 255
#: Unique modes as sk stores them (``UniqueMode``).
UNIQUE_MODES = {"skip": 1, "restart": 2, "replace": 3}


class SkError(Exception):
    """A job sk would refuse, or a schema document this client cannot read."""


class InvalidJob(SkError):
    """A job refused before anything was stored: ``field`` names the argument (dotted
    for a nested one) or the option at fault, where there is one."""

    def __init__(self, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.field = field


@dataclass
class Job:
    """One job to enqueue: its task type, its arguments and the options of this enqueue
    (each ``None`` takes the job's ``#[job]`` default from the schema)."""

    task_type: str
    args: dict
    queue: Optional[str] = None
    priority: Optional[int] = None
    #: Runs no earlier than this long from now (``timedelta`` or seconds).
    delay: Optional[Union[timedelta, float]] = None
    #: Runs no earlier than this instant (timezone-aware).
    run_at: Optional[datetime] = None
    max_attempts: Optional[int] = None
    unique_key: Optional[str] = None
    #: What a duplicate key does: ``skip`` (default), ``replace`` or ``restart``.
    unique_mode: Optional[str] = None
    tenant: Optional[str] = None
    correlation_id: Optional[str] = None
    metadata: Optional[dict] = None
    source: str = "app"


@dataclass(frozen=True)
class Enqueued:
    """The job an enqueue stored or found: the new job's id, or that of the live job
    holding the unique key; ``outcome`` is ``inserted``, ``duplicate``, ``updated``
    (a waiting job took the new payload) or ``rerun_scheduled``."""

    id: uuid.UUID
    outcome: str


@dataclass
class Schema:
    """The schema document of sk's jobs (``sk schema``): per task type its defaults and
    the JSON Schema of its arguments."""

    jobs: dict
    _validators: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, document: dict) -> "Schema":
        if not isinstance(document, dict) or document.get("format") != SCHEMA_FORMAT:
            found = document.get("format") if isinstance(document, dict) else type(document).__name__
            raise SkError(f"not an sk schema document of format {SCHEMA_FORMAT!r} (found {found!r})")
        jobs = document.get("jobs")
        if not isinstance(jobs, dict):
            raise SkError("the schema document has no `jobs` object")
        return cls(jobs=jobs)

    @classmethod
    def from_file(cls, path: Union[str, os.PathLike]) -> "Schema":
        """The document ``sk schema`` printed, checked into the producer's repository."""
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    @classmethod
    def from_database(cls, conn, *, db_schema: str = "public", prefix: str = "sk_") -> "Schema":
        """What the running workers published at start (their ``task_types_t`` rows)."""
        table = sql.Identifier(db_schema, f"{prefix}task_types_t")
        rows = conn.execute(
            sql.SQL("SELECT type_name, type_schema FROM {} ORDER BY type_name").format(table)
        ).fetchall()
        return cls(jobs={name: json.loads(document) for name, document in rows})

    def job(self, task_type: str) -> dict:
        """The entry of ``task_type``: its defaults and ``args``."""
        entry = self.jobs.get(task_type)
        if entry is None:
            known = ", ".join(sorted(self.jobs)) or "none"
            raise InvalidJob(f"no job named {task_type!r} in the schema (known: {known})", "task_type")
        return entry

    def check(self, task_type: str, args: Any) -> None:
        """Raises :class:`InvalidJob`, naming the field, when ``args`` do not fit the job's
        arguments."""
        entry = self.job(task_type)
        if not isinstance(args, dict):
            raise InvalidJob(f"{task_type}: the arguments must be a JSON object, not {type(args).__name__}")
        validator = self._validators.get(task_type)
        if validator is None:
            schema = entry.get("args", {})
            validator = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)(schema)
            self._validators[task_type] = validator
        error = jsonschema.exceptions.best_match(validator.iter_errors(args))
        if error is not None:
            at, message = _describe(error)
            where = f"field {at!r}: " if at else ""
            raise InvalidJob(f"{task_type}: {where}{message}", at)


def _describe(error: jsonschema.ValidationError) -> tuple:
    """The field a validation error is about, and what is wrong with it."""
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [p for p in error.validator_value if p not in error.instance]
        if missing:
            name = f"{path}.{missing[0]}" if path else missing[0]
            return name, "missing (a required argument)"
    if error.validator == "anyOf" and all(
        isinstance(s, dict) and list(s) == ["required"] for s in error.validator_value
    ):
        names = [s["required"][0] for s in error.validator_value]
        name = f"{path}.{names[0]}" if path else names[0]
        return name, f"missing (a required argument, also accepted as {', '.join(names[1:])})"
    return path, error.message


def uuid7() -> uuid.UUID:
    """A UUIDv7 (time-ordered), as sk's own job ids."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62 | (rand & ((1 << 62) - 1))
    return uuid.UUID(int=value)


def _name(what: str, value: Optional[str]) -> None:
    if value is None:
        return
    if not isinstance(value, str) or value == "":
        raise InvalidJob(f"{what} must be a non-empty string", what)
    if len(value.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidJob(f"{what} is {len(value.encode())} bytes, over the limit of {MAX_NAME_BYTES}", what)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    if isinstance(value, dict):
        return any("\0" in k or _has_nul(v) for k, v in value.items())
    return False


_QUEUE_COLUMNS = """task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result,
    task_tenant, task_correlation_id, task_metadata"""

# sk's `enqueue_many`: queue rows alone (a job's results row comes with its first
# outcome), in the caller's order.
_INSERT_MANY = """INSERT INTO {q} (""" + _QUEUE_COLUMNS + """)
SELECT i.id, i.type, i.source, i.payload, i.priority, now(),
    coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond'),
    i.queue, i.max_attempts, false, i.tenant, i.correlation_id, i.metadata::jsonb
FROM unnest(%s::uuid[], %s::varchar[], %s::varchar[], %s::text[], %s::int4[], %s::timestamptz[],
    %s::int8[], %s::varchar[], %s::int4[], %s::varchar[], %s::varchar[], %s::text[])
    AS i(id, type, source, payload, priority, run_at, delay_ms, queue, max_attempts, tenant,
        correlation_id, metadata)"""

# sk's `enqueue_unique`: a live job holding the key is left alone (skip), takes the new
# payload and run-at time while it waits (replace), or takes the payload and runs once
# more after a running attempt (restart); a new job gets its results row at once.
_INSERT_UNIQUE = """WITH q AS (
    INSERT INTO {q} AS q (""" + _QUEUE_COLUMNS + """, task_unique_key, task_unique_mode)
    VALUES (%(id)s, %(type)s, %(source)s, %(payload)s, %(priority)s, now(),
        coalesce(%(run_at)s::timestamptz, now() + %(delay_ms)s::int8 * interval '1 millisecond'),
        %(queue)s, %(max_attempts)s, true, %(tenant)s, %(correlation_id)s, %(metadata)s::jsonb,
        %(key)s, %(mode)s)
    ON CONFLICT (task_unique_key) WHERE task_unique_key IS NOT NULL DO UPDATE SET
        task_payload = CASE WHEN (%(mode)s = 3 AND q.task_locked_by IS NULL) OR %(mode)s = 2
            THEN EXCLUDED.task_payload ELSE q.task_payload END,
        task_locked_until_ts = CASE WHEN %(mode)s = 3 AND q.task_locked_by IS NULL
            THEN EXCLUDED.task_locked_until_ts ELSE q.task_locked_until_ts END,
        task_rerun = q.task_rerun OR (%(mode)s = 2 AND q.task_locked_by IS NOT NULL)
    RETURNING q.task_id, q.xmax = 0 AS inserted, q.task_locked_by IS NOT NULL AS running
), res AS (
    INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
        task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id,
        task_metadata)
    SELECT %(id)s, %(type)s, %(source)s, %(queue)s, 1, %(priority)s, %(key)s, %(mode)s, now(),
        %(tenant)s, %(correlation_id)s, %(metadata)s::jsonb
    FROM q WHERE q.inserted
)
SELECT task_id, inserted, running FROM q"""


class Client:
    """Enqueues jobs checked against ``schema``, into sk's tables in ``db_schema`` with
    ``prefix`` (sk's defaults: ``public`` and ``sk_``), on the caller's psycopg 3
    connection and inside its transaction: nothing is visible, and no worker is woken,
    until the caller commits."""

    def __init__(self, schema: Schema, *, db_schema: str = "public", prefix: str = "sk_",
                 max_payload: int = MAX_PAYLOAD_BYTES):
        self.schema = schema
        self.max_payload = max_payload
        self._queue = sql.Identifier(db_schema, f"{prefix}tasks_queue_t")
        self._results = sql.Identifier(db_schema, f"{prefix}task_results_t")
        # sk's wake-up channel (`Schema::channel`).
        self.channel = (f"{prefix}task_queue_item_added" if db_schema == "public"
                        else f"{db_schema}_{prefix}task_queue_item_added")

    def enqueue(self, conn, task_type: str, args: dict, **options: Any) -> Enqueued:
        """Enqueues one job; ``options`` are the fields of :class:`Job`."""
        return self.enqueue_many(conn, [Job(task_type, args, **options)])[0]

    def enqueue_many(self, conn, jobs: Iterable[Job]) -> list:
        """Enqueues the jobs in one multi-row insert (those with a unique key one at a
        time, in the same transaction); returns what each did, in order. Every job is
        checked first: when one is refused, nothing is stored."""
        rows = [self._row(job) for job in jobs]
        if not rows:
            return []
        out: list = [None] * len(rows)
        plain = [(at, row) for at, row in enumerate(rows) if row["key"] is None]
        # In the caller's transaction: psycopg's own (begun by the first statement) on a
        # connection that is not autocommit; one of ours, committed here, on one that is.
        atomic = conn.transaction() if conn.autocommit else contextlib.nullcontext()
        with atomic:
            with conn.cursor() as cur:
                if plain:
                    columns = ["id", "type", "source", "payload", "priority", "run_at", "delay_ms",
                               "queue", "max_attempts", "tenant", "correlation_id", "metadata"]
                    arrays = [[row[c] for _, row in plain] for c in columns]
                    cur.execute(sql.SQL(_INSERT_MANY).format(q=self._queue), arrays)
                    for at, row in plain:
                        out[at] = Enqueued(row["id"], "inserted")
                unique = sql.SQL(_INSERT_UNIQUE).format(q=self._queue, r=self._results)
                for at, row in enumerate(rows):
                    if row["key"] is None:
                        continue
                    cur.execute(unique, row)
                    job_id, inserted, running = cur.fetchone()
                    out[at] = Enqueued(job_id, _outcome(inserted, row["mode"], running))
                cur.execute("SELECT pg_notify(%s, '')", [self.channel])
        return out

    def _row(self, job: Job) -> dict:
        entry = self.schema.job(job.task_type)
        _name("task_type", job.task_type)
        if entry.get("encrypted"):
            raise InvalidJob(
                f"{job.task_type} is #[job(encrypted)]: its arguments are sealed with the workers' keys, "
                "which this client does not hold; enqueue it from Rust", "task_type")
        self.schema.check(job.task_type, job.args)
        payload = json.dumps(job.args, separators=(",", ":"), ensure_ascii=False)
        if len(payload.encode("utf-8")) > self.max_payload:
            raise InvalidJob(
                f"{job.task_type}: the payload is {len(payload.encode())} bytes of JSON, over the limit of "
                f"{self.max_payload}", "args")
        queue = job.queue if job.queue is not None else entry.get("queue", "default")
        priority = job.priority if job.priority is not None else entry.get("priority", 0)
        max_attempts = job.max_attempts if job.max_attempts is not None else entry.get("max_attempts", 25)
        tenant = job.tenant
        tenant_from = entry.get("tenant_from")
        if tenant is None and tenant_from and isinstance(job.args.get(tenant_from), (str, int)) \
                and not isinstance(job.args.get(tenant_from), bool):
            tenant = str(job.args[tenant_from])
        for what, value in [("queue", queue), ("source", job.source), ("tenant", tenant),
                            ("correlation_id", job.correlation_id), ("unique_key", job.unique_key)]:
            _name(what, value)
        if not isinstance(priority, int) or not -(2 ** 31) <= priority < 2 ** 31:
            raise InvalidJob(f"priority must be a 32-bit integer, not {priority!r}", "priority")
        if not isinstance(max_attempts, int) or not 1 <= max_attempts < 2 ** 31:
            raise InvalidJob(f"max_attempts must be at least 1, not {max_attempts!r}", "max_attempts")
        if job.unique_mode is not None and job.unique_key is None:
            raise InvalidJob("unique_mode needs a unique_key", "unique_mode")
        mode = None
        if job.unique_key is not None:
            mode = UNIQUE_MODES.get(job.unique_mode or "skip")
            if mode is None:
                raise InvalidJob(
                    f"unique_mode must be one of {', '.join(UNIQUE_MODES)}, not {job.unique_mode!r}", "unique_mode")
        metadata = None
        if job.metadata is not None:
            if not isinstance(job.metadata, dict):
                raise InvalidJob("metadata must be a JSON object", "metadata")
            if _has_nul(job.metadata):
                raise InvalidJob("metadata must not hold a NUL character (PostgreSQL's jsonb cannot)", "metadata")
            metadata = json.dumps(job.metadata, separators=(",", ":"))
        if job.run_at is not None and job.delay is not None:
            raise InvalidJob("give delay or run_at, not both", "run_at")
        if job.run_at is not None and job.run_at.tzinfo is None:
            raise InvalidJob("run_at must be timezone-aware", "run_at")
        delay = job.delay.total_seconds() if isinstance(job.delay, timedelta) else (job.delay or 0)
        if delay < 0:
            raise InvalidJob(f"delay must not be negative, not {delay}", "delay")
        return {
            "id": uuid7(), "type": job.task_type, "source": job.source, "payload": payload,
            "priority": priority, "run_at": job.run_at, "delay_ms": int(delay * 1000),
            "queue": queue, "max_attempts": max_attempts, "tenant": tenant,
            "correlation_id": job.correlation_id, "metadata": metadata,
            "key": job.unique_key, "mode": mode,
        }


def _outcome(inserted: bool, mode: int, running: bool) -> str:
    if inserted:
        return "inserted"
    if mode == UNIQUE_MODES["restart"] and running:
        return "rerun_scheduled"
    if mode in (UNIQUE_MODES["restart"], UNIQUE_MODES["replace"]) and not running:
        return "updated"
    return "duplicate"
