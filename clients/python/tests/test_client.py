"""The Python client against a real PostgreSQL with sk's tables (made by `sk migrate`):
the rows it writes are sk's, a payload the schema refuses is refused naming the field and
never stored, and everything happens inside the caller's transaction."""

import json
import os
import pathlib
import subprocess
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import sk_client
from sk_client import Client, InvalidJob, Job, Schema, SkError

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCHEMA_FILE = ROOT / "clients" / "testdata" / "sk-schema.json"
SERVER = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")

ORDER = {
    "order_id": 42,
    "shop": "acme",
    "lines": [{"sku": "A-1", "qty": 2}],
    "placed_at": "2026-11-29T10:00:00Z",
}


def sk_command():
    """sk's command (target/debug/sk, or $SK_BIN), built where it is missing."""
    path = pathlib.Path(os.environ.get("SK_BIN", ROOT / "target" / "debug" / "sk"))
    if not path.exists():
        subprocess.run(["cargo", "build", "--locked", "-p", "sk-cli", "--bin", "sk"], cwd=ROOT, check=True)
    return str(path)


@pytest.fixture
def url():
    """A database of its own with sk's tables, dropped after the test."""
    name = f"sk_py_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = SERVER.rpartition("/")
    db_url = f"{base}/{name}"
    try:
        subprocess.run([sk_command(), "--database-url", db_url, "migrate"], check=True, capture_output=True)
        yield db_url
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def client():
    return Client(Schema.from_file(SCHEMA_FILE))


def queued(conn):
    return conn.execute(
        "SELECT task_id, task_type, task_source, task_payload, task_priority, task_queue, task_max_attempts,"
        " task_tenant, task_correlation_id, task_metadata, task_unique_key, task_unique_mode,"
        " task_locked_until_ts - task_posted_at_ts FROM sk_tasks_queue_t ORDER BY task_lock_handle_id"
    ).fetchall()


def test_one_job_is_sk_row_and_wakes_workers_at_commit(url, client):
    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url) as conn:
        listener.execute(f"LISTEN {client.channel}")
        job = client.enqueue(conn, "place_order", ORDER, delay=timedelta(seconds=30),
                             correlation_id="req-7", metadata={"from": "django"})
        assert job.outcome == "inserted" and job.id.version == 7
        with psycopg.connect(url) as other:
            assert queued(other) == [], "visible before the caller's commit"
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
        conn.commit()
        woken = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.channel for n in woken] == ["sk_task_queue_item_added"]
        [row] = queued(conn)
    (job_id, task_type, source, payload, priority, queue, attempts, tenant, correlation, metadata,
     key, mode, delay) = row
    assert job_id == job.id and task_type == "place_order" and source == "app"
    assert json.loads(payload) == ORDER
    # The job's #[job] defaults from the schema, and its tenant from its `shop` argument.
    assert (priority, queue, attempts, tenant) == (3, "orders", 4, "acme")
    assert (correlation, metadata, key, mode) == ("req-7", {"from": "django"}, None, None)
    assert delay == timedelta(seconds=30)


def test_a_refused_payload_names_its_field_and_stores_nothing(url, client):
    cases = [
        ({**ORDER, "order_id": "42"}, "order_id", "is not of type 'integer'"),
        ({k: v for k, v in ORDER.items() if k != "shop"}, "shop", "missing"),
        ({**ORDER, "lines": [{"sku": "A-1", "qty": -1}]}, "lines.0.qty", "less than the minimum"),
        ({k: v for k, v in ORDER.items() if k != "placed_at"}, "placed_at", "also accepted as when"),
    ]
    with psycopg.connect(url) as conn:
        for args, field, words in cases:
            with pytest.raises(InvalidJob) as refused:
                client.enqueue(conn, "place_order", args)
            assert refused.value.field == field, str(refused.value)
            assert words in str(refused.value) and f"'{field}'" in str(refused.value)
        # The alias is accepted, and a batch with one bad job stores none of them.
        when = {**{k: v for k, v in ORDER.items() if k != "placed_at"}, "when": "2026-11-29T10:00:00Z"}
        with pytest.raises(InvalidJob):
            client.enqueue_many(conn, [Job("place_order", when), Job("place_order", {**ORDER, "gift": "yes"})])
        conn.commit()
        assert queued(conn) == []
        client.enqueue(conn, "place_order", when)
        conn.commit()
        assert len(queued(conn)) == 1


def test_options_are_checked_as_sk_checks_them(url, client):
    bad = [
        (dict(queue=""), "queue"),
        (dict(tenant="t" * 256), "tenant"),
        (dict(priority=2 ** 31), "priority"),
        (dict(max_attempts=0), "max_attempts"),
        (dict(unique_mode="replace"), "unique_mode"),
        (dict(unique_key="k", unique_mode="sometimes"), "unique_mode"),
        (dict(metadata=["not", "an", "object"]), "metadata"),
        (dict(metadata={"a": "nul\0"}), "metadata"),
        (dict(delay=-1), "delay"),
        (dict(run_at=datetime(2030, 1, 1)), "run_at"),
    ]
    with psycopg.connect(url) as conn:
        for options, field in bad:
            with pytest.raises(InvalidJob) as refused:
                client.enqueue(conn, "place_order", ORDER, **options)
            assert refused.value.field == field, (options, str(refused.value))
        with pytest.raises(InvalidJob, match="no job named 'nope' in the schema \\(known: place_order, sealed_note\\)"):
            client.enqueue(conn, "nope", {})
        with pytest.raises(InvalidJob, match="encrypted"):
            client.enqueue(conn, "sealed_note", {"text": "hi"})
        with pytest.raises(InvalidJob, match="over the limit of 100"):
            Client(client.schema, max_payload=100).enqueue(conn, "place_order", {**ORDER, "note": "x" * 100})
        conn.commit()
        assert queued(conn) == []


def test_many_jobs_in_one_insert_in_order(url, client):
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    jobs = [Job("place_order", {**ORDER, "order_id": n}, priority=n, run_at=at if n == 2 else None)
            for n in range(5)]
    with psycopg.connect(url) as conn:
        done = client.enqueue_many(conn, jobs)
        conn.commit()
        rows = queued(conn)
        assert [r[0] for r in rows] == [d.id for d in done]
        assert [json.loads(r[3])["order_id"] for r in rows] == [0, 1, 2, 3, 4]
        assert [r[4] for r in rows] == [0, 1, 2, 3, 4]
        locked = conn.execute("SELECT task_locked_until_ts FROM sk_tasks_queue_t WHERE task_id = %s",
                              [done[2].id]).fetchone()[0]
        assert locked == at
        assert client.enqueue_many(conn, []) == []


def test_unique_keys_skip_replace_and_restart(url, client):
    with psycopg.connect(url) as conn:
        first = client.enqueue(conn, "place_order", ORDER, unique_key="order-42")
        again = client.enqueue(conn, "place_order", {**ORDER, "gift": True}, unique_key="order-42")
        assert first.outcome == "inserted" and again == sk_client.Enqueued(first.id, "duplicate")
        replaced = client.enqueue(conn, "place_order", {**ORDER, "gift": True}, unique_key="order-42",
                                  unique_mode="replace")
        assert replaced == sk_client.Enqueued(first.id, "updated")
        # A batch may mix keyed and plain jobs: the keyed one finds the live job.
        mixed = client.enqueue_many(conn, [Job("place_order", ORDER), Job("place_order", ORDER, unique_key="order-42")])
        assert mixed[0].outcome == "inserted" and mixed[1] == sk_client.Enqueued(first.id, "duplicate")
        conn.commit()
        payload, key, mode = conn.execute(
            "SELECT task_payload, task_unique_key, task_unique_mode FROM sk_tasks_queue_t WHERE task_id = %s",
            [first.id]).fetchone()
        assert json.loads(payload)["gift"] is True and (key, mode) == ("order-42", 1)
        # As sk's own enqueue: a keyed job has its results row (waiting) from the start.
        status = conn.execute("SELECT task_status FROM sk_task_results_t WHERE task_id = %s", [first.id]).fetchone()
        assert status == (1,)


def test_a_rolled_back_transaction_leaves_nothing(url, client):
    with psycopg.connect(url) as conn:
        client.enqueue(conn, "place_order", ORDER)
        client.enqueue(conn, "place_order", ORDER, unique_key="k")
        conn.rollback()
        assert queued(conn) == []
        assert conn.execute("SELECT count(*) FROM sk_task_results_t").fetchone() == (0,)


def test_the_schema_from_the_database_and_bad_documents(url):
    document = json.loads(SCHEMA_FILE.read_text())
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO sk_task_types_t VALUES ('place_order', %s, 'worker-1', now())",
            [json.dumps(document["jobs"]["place_order"])],
        )
        schema = Schema.from_database(conn)
        assert list(schema.jobs) == ["place_order"]
        Client(schema).enqueue(conn, "place_order", ORDER)
        with pytest.raises(InvalidJob, match="'order_id'"):
            Client(schema).enqueue(conn, "place_order", {**ORDER, "order_id": 1.5})
    with pytest.raises(SkError, match="format 'sk-schema/1'"):
        Schema.from_dict({"format": "sk-schema/9", "jobs": {}})
    with pytest.raises(SkError, match="no `jobs` object"):
        Schema.from_dict({"format": "sk-schema/1"})


def test_ids_are_uuid_v7_in_time_order():
    ids = [sk_client.uuid7() for _ in range(1000)]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 1000
    stamps = [i.int >> 80 for i in ids]
    assert stamps == sorted(stamps)


def test_an_autocommit_connection_stores_at_once(url, client):
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as other:
        done = client.enqueue_many(conn, [Job("place_order", ORDER), Job("place_order", ORDER, unique_key="k")])
        assert [r[0] for r in queued(other)] == [d.id for d in done]
