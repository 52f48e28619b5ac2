"""The Python side of sk's cross-language test (tests/clients.rs): enqueues `place_order`
jobs for a Rust worker and prints what it did as one JSON object. Usage:
produce.py DATABASE_URL SCHEMA_FILE"""

import json
import sys

import psycopg

from sk_client import Client, InvalidJob, Job, Schema

url, schema_file = sys.argv[1], sys.argv[2]
order = {"shop": "python-shop", "placed_at": "2026-11-29T10:00:00Z", "lines": []}
with psycopg.connect(url) as conn:
    # One job with every option, checked against the schema file `sk schema` printed.
    from_file = Client(Schema.from_file(schema_file))
    first = from_file.enqueue(
        conn, "place_order",
        {"order_id": 1, "shop": "python-shop", "lines": [{"sku": "A-1", "qty": 3}], "note": "from python",
         "gift": True, "when": "2026-11-29T10:00:00Z", "wrapping": {"paper": "red"}},
        priority=1, unique_key="python-order", correlation_id="python-1", metadata={"lang": "python"},
    )
    conn.commit()
    # Two in one insert, checked against the schema the worker published.
    from_db = Client(Schema.from_database(conn))
    many = from_db.enqueue_many(conn, [Job("place_order", {**order, "order_id": n}) for n in (10, 11)])
    conn.commit()
    try:
        from_db.enqueue(conn, "place_order", {**order, "order_id": "13"})
        raise SystemExit("the schema took an order id that is a string")
    except InvalidJob as refused:
        refused_message, field = str(refused), refused.field
    from_db.enqueue(conn, "place_order", {**order, "order_id": 14})
    conn.rollback()
print(json.dumps({"ids": [str(first.id)] + [str(j.id) for j in many], "refused": refused_message, "field": field}))
