#!/usr/bin/env bash
# Runs Tether's standard load scenarios on this machine and writes a markdown table.
#
#   loadtests/run.sh [OUT.md]        (default: loadtests/results.md)
#   QUICK=1 loadtests/run.sh         smaller fleets, for a first look
#
# Scenarios: steady heartbeats, assignment bursts (10→200/s), a connect storm and revocation
# under load on the embedded default (SQLite); the same steady and burst loads on PostgreSQL;
# two replicas on one PostgreSQL + Redis; one replica killed with SIGKILL under load;
# revocation under load on two replicas (revoked on A, noticed through Redis on B); a pgbench
# single-row UPDATE baseline on the same PostgreSQL. PostgreSQL and Redis are started
# privately from the machine's binaries on loopback and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-loadtests/results.md}
QUICK=${QUICK:-0}

cargo build --release -p tether-server -p tether-loadtest
SERVER=target/release/tether-server
LOAD=target/release/tether-loadtest
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  if [ -n "${PGDATA:-}" ]; then run_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# PostgreSQL refuses to run as root; run its tools as the postgres user then.
run_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start_postgres() {
  PGBIN=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  PGDATA=$WORK/pg; PGPORT=$(free_port)
  mkdir -p "$PGDATA"; [ "$(id -u)" = 0 ] && chown postgres "$WORK" "$PGDATA"
  run_pg "$PGBIN/initdb" -D "$PGDATA" -U tether --auth=trust >/dev/null
  run_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/log" -w \
    -o "-p $PGPORT -k $PGDATA -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on -c synchronous_commit=on" start >/dev/null
  run_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U tether tether
  PGURL="postgres://tether@127.0.0.1:$PGPORT/tether"
}

start_redis() {
  REDISPORT=$(free_port)
  redis-server --port "$REDISPORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
  PIDS+=($!)
  REDISURL="redis://127.0.0.1:$REDISPORT"
  for _ in $(seq 50); do redis-cli -p "$REDISPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
}

# start_server NAME [ENV=VALUE…]: a release server on a free port; sets URL and PID.
start_server() {
  local name=$1; shift
  local port; port=$(free_port)
  env TETHER_RATE_LIMITS=off TETHER_HEARTBEAT_SECS=${HEARTBEAT_SECS:-2} RUST_LOG=warn \
    TETHER_DATA_DIR="$WORK/$name" "$@" "$SERVER" --listen "127.0.0.1:$port" >"$WORK/$name.log" 2>&1 &
  PID=$!; PIDS+=("$PID")
  URL="http://127.0.0.1:$port"
  for _ in $(seq 100); do curl -fs "$URL/healthz" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "server $name did not start:"; cat "$WORK/$name.log"; exit 1
}

# row ARGS…: one table row; a revocation run's "revocation (…): …" line goes under the table.
row() {
  local out; out=$("$LOAD" "$@")
  grep '^| ' <<<"$out" | tail -1 | tee -a "$OUT.rows"
  grep '^revocation' <<<"$out" | tee -a "$OUT.notes" || true
}

if [ "$QUICK" = 1 ]; then STEADY=300; STORM="300 1000"; BURSTS="10 50"; SECS=10
else STEADY=1000; STORM="1000 5000 10000"; BURSTS="10 50 100 200"; SECS=20; fi
REVOKE_DEVICES=300; REVOKE=30

: > "$OUT.rows"; : > "$OUT.notes"
echo "== embedded (SQLite)"
for n in $STORM; do
  start_server "storm-$n"
  row --server "$URL" --devices "$n" --devices-per-account 50 --rate 10 --duration "$SECS" --server-pid "$PID" --label "SQLite storm $n devices"
  kill -9 "$PID"
done
for rate in $BURSTS; do
  start_server "burst-$rate"
  row --server "$URL" --devices 200 --devices-per-account 10 --rate "$rate" --duration "$SECS" --server-pid "$PID" --label "SQLite $rate jobs/s"
  kill -9 "$PID"
done
# The owners revoke 30 devices at once halfway through: each must notice, stop, and its
# token must be refused; its jobs end interrupted/cancelled, none is lost.
start_server revoke
row --server "$URL" --devices "$REVOKE_DEVICES" --devices-per-account 10 --rate 20 --duration "$SECS" --job-ms 2000 --revoke "$REVOKE" --server-pid "$PID" --label "SQLite revoke $REVOKE of $REVOKE_DEVICES"
kill -9 "$PID"

echo "== PostgreSQL"
start_postgres
start_server pg-steady TETHER_DATABASE_URL="$PGURL"
row --server "$URL" --devices "$STEADY" --devices-per-account 10 --rate 20 --duration "$SECS" --server-pid "$PID" --label "PostgreSQL steady $STEADY devices"
for rate in $BURSTS; do
  row --server "$URL" --devices 200 --devices-per-account 10 --rate "$rate" --duration "$SECS" --server-pid "$PID" --label "PostgreSQL $rate jobs/s"
done
kill -9 "$PID"

echo "== two replicas, PostgreSQL + Redis"
start_redis
start_server replica-a TETHER_DATABASE_URL="$PGURL" TETHER_REDIS_URL="$REDISURL"; URL_A=$URL; PID_A=$PID
start_server replica-b TETHER_DATABASE_URL="$PGURL" TETHER_REDIS_URL="$REDISURL"; URL_B=$URL; PID_B=$PID
row --server "$URL_A" --server "$URL_B" --devices "$STEADY" --devices-per-account 10 --rate 100 --duration "$SECS" --label "2 replicas 100 jobs/s"
# Kill replica B part-way through: its devices move to A; no job may be lost or run twice.
( sleep $((SECS / 2 + 5)); kill -9 "$PID_B" ) &
row --server "$URL_A" --server "$URL_B" --devices "$STEADY" --devices-per-account 10 --rate 50 --duration "$SECS" --label "2 replicas, B killed mid-run"
# Revocations go to replica A; the devices streaming from B (a fresh one) learn through Redis.
start_server replica-b2 TETHER_DATABASE_URL="$PGURL" TETHER_REDIS_URL="$REDISURL"; URL_B=$URL
row --server "$URL_A" --server "$URL_B" --devices "$REVOKE_DEVICES" --devices-per-account 10 --rate 20 --duration "$SECS" --job-ms 2000 --revoke "$REVOKE" --label "2 replicas revoke $REVOKE of $REVOKE_DEVICES"

echo "== pgbench baseline"
run_pg "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U tether -i -q tether >/dev/null 2>&1
echo 'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1 + (random() * 99999)::int;' > "$WORK/update.sql"
chmod a+r "$WORK/update.sql"
TPS=$(run_pg "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U tether -n -c 8 -j 2 -T 10 -f "$WORK/update.sql" tether 2>/dev/null \
  | awk '/^tps/ {print int($3)}' | head -1)

{
  echo "# Load test results"
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); heartbeat every ${HEARTBEAT_SECS:-2} s; run on $(date -u +%Y-%m-%d)."
  echo
  echo "| run | devices | connect s | assign→claim ms p50/p95/p99/max | assign→done ms p50/p95/p99/max | heartbeat ms p50/p95/p99/max | heartbeats/s | jobs/s | jobs ok/assigned | lost | rerun | dup claims | errors | RSS MiB | RSS/device KiB |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  cat "$OUT.rows"
  if [ -s "$OUT.notes" ]; then echo; cat "$OUT.notes"; fi
  echo
  echo "pgbench baseline (single-row UPDATE, 8 clients, same PostgreSQL): $TPS tps"
} > "$OUT"
rm -f "$OUT.rows" "$OUT.notes"
cat "$OUT"
