#!/usr/bin/env bash
# What the clients' tests (and the cross-language test, tests/clients.rs) need, installed
# where it is missing: the Python client in a virtual environment of its own
# (clients/python/.venv, with pytest), and the TypeScript client's packages from its
# package-lock.json (clients/typescript/node_modules).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x python/.venv/bin/pytest ]; then
    command -v python3 >/dev/null || { echo "python3 is missing: the Python client needs it" >&2; exit 1; }
    python3 -m venv python/.venv
    python/.venv/bin/pip install --quiet --disable-pip-version-check -e 'python[test]'
fi
if [ ! -d typescript/node_modules/pg ]; then
    command -v npm >/dev/null || { echo "npm is missing: the TypeScript client needs Node.js and npm" >&2; exit 1; }
    (cd typescript && npm ci --no-audit --no-fund)
fi
