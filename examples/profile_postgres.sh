#!/usr/bin/env bash
# Where a PostgreSQL burn-down's cost goes, sk's beside the minimal queue's: starts a
# PostgreSQL server of its own (with pg_stat_statements), runs `bench --only profile`
# (sk's burn-down at concurrency 16, then the minimal table's, each alone) with
# SK_BENCH_PROFILE set, and prints for each: the statements by time, the write-ahead
# log's records by type (pg_waldump --stats) and the machine's CPU by process and
# function (perf). Needs root (perf -a, initdb as postgres) and PostgreSQL 15's programs.
#
#   examples/profile_postgres.sh [JOBS]      (default 100000; output kept in $OUT)
set -euo pipefail
jobs=${1:-100000}
bin=/usr/lib/postgresql/15/bin
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH:-$here/target/release/bench}
[ -x "$bench" ] || cargo build --release -p sk-examples --bin bench
out=${OUT:-$(mktemp -d /tmp/sk-profile-XXXX)}
mkdir -p "$out"
data=$(mktemp -d /tmp/sk-profile-pg-XXXX)
chown postgres "$data" "$out"
port=5441
runuser -u postgres -- "$bin/initdb" -D "$data/db" -A trust -U postgres >/dev/null
cat >>"$data/db/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$data'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track_utility = off
autovacuum = off
shared_buffers = 128MB
max_wal_size = 1GB
wal_keep_size = 4GB
CONF
runuser -u postgres -- "$bin/pg_ctl" -D "$data/db" -l "$data/log" -w start >/dev/null
trap 'runuser -u postgres -- "$bin/pg_ctl" -D "$data/db" -m fast stop >/dev/null; rm -rf "$data"' EXIT
psql -h 127.0.0.1 -p $port -U postgres -qc "CREATE EXTENSION pg_stat_statements"

DATABASE_URL=postgres://postgres@127.0.0.1:$port/postgres SK_BENCH_PROFILE=$out \
  "$bench" --only profile --jobs "$jobs" | tee "$out/figures.txt"

# The pipes below end in head: its early exit is not a failure.
set +o pipefail
for range in "$out"/*.wal-range; do
  stem=${range%.wal-range}
  read -r from to <"$stem.wal-range"
  "$bin/pg_waldump" --stats=record -p "$data/db/pg_wal" -s "$from" -e "$to" >"$stem.wal-stats.txt" 2>&1
  perf report -i "$stem.perf.data" --no-children --sort comm --stdio -q -g none \
    >"$stem.perf-comm.txt" 2>/dev/null
  perf report -i "$stem.perf.data" --no-children --comm postgres --sort sym --stdio -q -g none \
    >"$stem.perf-postgres.txt" 2>/dev/null
  echo
  echo "=== $(basename "$stem"): statements"
  cat "$stem.statements.txt"
  echo "=== $(basename "$stem"): write-ahead log $from .. $to, records by combined size"
  # Parentheses (the shares) removed, the last field is the combined size.
  awk 'NR > 2 && $2 > 0 { line = $0; gsub(/\([^)]*\)/, ""); print $NF "\t" line }' \
    "$stem.wal-stats.txt" | sort -rn | cut -f2 | head -20
  echo "=== $(basename "$stem"): CPU by process"
  head -8 "$stem.perf-comm.txt"
  echo "=== $(basename "$stem"): postgres CPU by function"
  head -25 "$stem.perf-postgres.txt"
done
echo "output kept in $out"
