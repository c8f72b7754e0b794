#!/usr/bin/env bash
# Runs Tether's standard load scenarios on this machine and writes a markdown table.
#
#   loadtests/run.sh [OUT.md]        (default: loadtests/results.md)
#   QUICK=1 loadtests/run.sh         smaller fleets, for a first look
#
# Scenarios, each figure beside a ceiling measured in the same run:
# - the ceilings: a bare actix-web JSON endpoint (`tether-ceiling`) under the same wrk load as
#   the heartbeat route, and pgbench's single-row UPDATE on the same PostgreSQL;
# - on SQLite and on PostgreSQL: heartbeats under wrk for 100, 1,000 and 10,000 paired
#   devices; claims at 200 jobs/s and complete lifecycles at 1,000 jobs/s (200 devices over
#   20 accounts); a growing fleet (100 → 1,000 → 10,000 devices) at 20 jobs/s;
# - revocation under load (SQLite); two replicas on one PostgreSQL + Redis at 200 and 1,000
#   jobs/s, one of them killed with SIGKILL under load, and revocation across them;
# - streaming output: 1,000 running jobs each sending 20 lines/s with 500 browsers watching
#   job pages (PostgreSQL, one replica), and 200 jobs with 100 watchers on SQLite.
# Every row gives the CPU seconds the load generator (tether-loadtest or wrk) and the server
# used, so a reader can tell which side saturated. PostgreSQL and Redis are started privately
# from the machine's binaries on loopback and removed afterwards; wrk comes from Debian
# (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-loadtests/results.md}
QUICK=${QUICK:-0}

cargo build --release -p tether-server -p tether-loadtest --bins
SERVER=target/release/tether-server
LOAD=target/release/tether-loadtest
STREAM=target/release/tether-stream
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
# A run that fails (say, a fleet that cannot connect) gets a row saying why, and the rest go on.
row() {
  local out label=run previous=""
  for arg in "$@"; do [ "$previous" = --label ] && label=$arg; previous=$arg; done
  if ! out=$("$LOAD" "$@" 2>&1); then
    echo "| $label | failed: $(grep -m1 '^Error' <<<"$out" | tr '|' '/') |" | tee -a "$OUT.rows"
    return 0
  fi
  grep '^| ' <<<"$out" | tail -1 | tee -a "$OUT.rows"
  grep '^revocation' <<<"$out" | tee -a "$OUT.notes" || true
}

# cpu_secs PID: user + system CPU seconds the process has used so far.
cpu_secs() { awk -v tck="$(getconf CLK_TCK)" '{print ($14 + $15) / tck}' "/proc/$1/stat"; }

# wrk_row LABEL URL DEVICES_FILE [SERVER_PID]: heartbeats under wrk (2 threads, 64
# connections) for $WRK_SECS s, after a 3 s warm-up (each device's first heartbeat writes its
# capability report; later ones are "still here"); the rate, latency, errors, and the CPU
# seconds wrk itself and the server used in the window. 64 connections: at ~35,000/s more of
# them only add queueing (256 connections put even the bare endpoint's p99 at ~16 ms).
wrk_row() {
  local label=$1 url=$2 file=$3 pid=${4:-} before=0 after=0 server="-"
  wrk -t2 -c64 -d3s -s loadtests/heartbeat.lua "$url/api/devices/self/heartbeat" -- "$file" >/dev/null
  [ -n "$pid" ] && before=$(cpu_secs "$pid")
  local out; out=$( { TIMEFORMAT='%U %S'; time wrk -t2 -c64 -d"${WRK_SECS}s" --latency \
      -s loadtests/heartbeat.lua "$url/api/devices/self/heartbeat" -- "$file"; } 2>&1 )
  [ -n "$pid" ] && after=$(cpu_secs "$pid") && server=$(awk -v a="$after" -v b="$before" 'BEGIN {printf "%.1f", a - b}')
  local rate p50 p99 errors load
  rate=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' <<<"$out")
  p50=$(awk '/^wrk:/ {print $11}' <<<"$out")
  p99=$(awk '/^wrk:/ {print $14}' <<<"$out")
  errors=$(awk '/^wrk:/ {print $4}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out"); errors=$((errors + ${non2xx:-0}))
  load=$(tail -1 <<<"$out" | awk '{printf "%.1f", $1 + $2}')
  echo "| $label | $rate | $p50 | $p99 | $errors | $load / $server of $WRK_SECS |" | tee -a "$OUT.wrk"
}

# pair_for_wrk URL DEVICES FILE: pairs DEVICES simulated devices (10 per account) and writes
# their tokens and heartbeat bodies for wrk.
pair_for_wrk() {
  "$LOAD" --server "$1" --devices "$2" --devices-per-account 10 --wrk-out "$3" >/dev/null
}

if [ "$QUICK" = 1 ]; then SECS=10; WRK_SECS=10; GROWTH="100 1000"; LIFECYCLE_SECS=10
else SECS=20; WRK_SECS=20; GROWTH="100 1000 10000"; LIFECYCLE_SECS=30; fi
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk"; exit 1; }

: > "$OUT.rows"; : > "$OUT.notes"; : > "$OUT.wrk"

echo "== the ceilings: a bare actix-web JSON endpoint under the same wrk, and pgbench"
CEILING_PORT=$(free_port)
target/release/tether-ceiling "127.0.0.1:$CEILING_PORT" >/dev/null 2>&1 &
CEILING_PID=$!; PIDS+=("$CEILING_PID")
start_server ceiling-devices
pair_for_wrk "$URL" 1000 "$WORK/wrk-1000"
kill -9 "$PID"
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$CEILING_PORT/" && break; sleep 0.1; done
wrk_row "bare actix-web JSON endpoint (ceiling)" "http://127.0.0.1:$CEILING_PORT" "$WORK/wrk-1000" "$CEILING_PID"
kill -9 "$CEILING_PID"
start_postgres
run_pg "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U tether -i -q tether >/dev/null 2>&1
# The row is drawn by pgbench (`\set`): a `random()` in the WHERE clause would make every
# UPDATE scan the table.
printf '%s\n' '\set aid random(1, 100000)' \
  'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;' > "$WORK/update.sql"
chmod a+r "$WORK/update.sql"
pgbench_tps() {
  run_pg "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U tether -n -M prepared -c "$1" -j 2 -T 10 -f "$WORK/update.sql" tether 2>/dev/null \
    | awk '/^tps/ {print int($3)}' | head -1
}
TPS_1=$(pgbench_tps 1); TPS_8=$(pgbench_tps 8)
run_pg "$PGBIN/dropdb" -h 127.0.0.1 -p "$PGPORT" -U tether tether
run_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U tether tether

for backend in SQLite PostgreSQL; do
  if [ "$backend" = PostgreSQL ]; then DB=(TETHER_DATABASE_URL="$PGURL"); else DB=(); fi
  echo "== $backend: heartbeats under wrk, growing fleets"
  for n in $GROWTH; do
    start_server "hb-$backend-$n" "${DB[@]}"
    pair_for_wrk "$URL" "$n" "$WORK/wrk-$backend-$n"
    wrk_row "$backend heartbeats, $n devices" "$URL" "$WORK/wrk-$backend-$n" "$PID"
    kill -9 "$PID"
  done
  echo "== $backend: claims at 200 jobs/s, lifecycles at 1,000 jobs/s"
  start_server "jobs-$backend" "${DB[@]}" TETHER_HEARTBEAT_SECS=30
  row --server "$URL" --devices 200 --devices-per-account 10 --rate 200 --duration "$SECS" --server-pid "$PID" --label "$backend 200 jobs/s"
  row --server "$URL" --devices 200 --devices-per-account 10 --rate 1000 --duration "$LIFECYCLE_SECS" --server-pid "$PID" --label "$backend 1,000 jobs/s"
  kill -9 "$PID"
  echo "== $backend: a growing fleet at 20 jobs/s"
  for n in $GROWTH; do
    start_server "fleet-$backend-$n" "${DB[@]}" TETHER_HEARTBEAT_SECS=30
    row --server "$URL" --devices "$n" --devices-per-account 50 --rate 20 --duration "$SECS" --server-pid "$PID" --label "$backend $n devices"
    kill -9 "$PID"
  done
done

echo "== SQLite: revocation under load"
start_server revoke
row --server "$URL" --devices 300 --devices-per-account 10 --rate 20 --duration "$SECS" --job-ms 2000 --revoke 30 --server-pid "$PID" --label "SQLite revoke 30 of 300"
kill -9 "$PID"

echo "== streaming output: jobs sending lines while browsers watch (PostgreSQL, one replica; SQLite)"
# tether-stream: every job claimed by its own device sends 20 lines/s in the agent's batches
# (one per 250 ms); watchers follow job pages on their event streams. On its own database, and
# with the heartbeat at its default pace so heartbeats stay a small part of the load.
# stream_row ARGS…: one tether-stream row, or a row saying why the run failed.
stream_row() {
  local out label=run previous=""
  for arg in "$@"; do [ "$previous" = --label ] && label=$arg; previous=$arg; done
  if ! out=$("$STREAM" "$@" 2>&1); then
    echo "| $label | failed: $(grep -m1 '^Error' <<<"$out" | tr '|' '/') |" | tee -a "$OUT.stream"
    return 0
  fi
  grep '^| ' <<<"$out" | tail -1 | tee -a "$OUT.stream"
}
if [ "$QUICK" = 1 ]; then STREAM_PG=(200 100); STREAM_LITE=(100 50); STREAM_SECS=15
else STREAM_PG=(1000 500); STREAM_LITE=(200 100); STREAM_SECS=60; fi
: > "$OUT.stream"
run_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U tether stream
start_server stream-pg TETHER_DATABASE_URL="postgres://tether@127.0.0.1:$PGPORT/stream" TETHER_HEARTBEAT_SECS=30
stream_row --server "$URL" --jobs "${STREAM_PG[0]}" --watchers "${STREAM_PG[1]}" --lines-per-sec 20 \
  --duration "$STREAM_SECS" --server-pid "$PID" --database-pid "$(head -1 "$PGDATA/postmaster.pid")" \
  --label "PostgreSQL ${STREAM_PG[0]} jobs × 20 lines/s, ${STREAM_PG[1]} watchers"
kill -9 "$PID"
start_server stream-sqlite TETHER_HEARTBEAT_SECS=30
stream_row --server "$URL" --jobs "${STREAM_LITE[0]}" --watchers "${STREAM_LITE[1]}" --lines-per-sec 20 \
  --duration "$STREAM_SECS" --server-pid "$PID" \
  --label "SQLite ${STREAM_LITE[0]} jobs × 20 lines/s, ${STREAM_LITE[1]} watchers"
kill -9 "$PID"

echo "== two replicas, PostgreSQL + Redis"
start_redis
start_server replica-a TETHER_DATABASE_URL="$PGURL" TETHER_REDIS_URL="$REDISURL" TETHER_HEARTBEAT_SECS=30; URL_A=$URL; PID_A=$PID
start_server replica-b TETHER_DATABASE_URL="$PGURL" TETHER_REDIS_URL="$REDISURL" TETHER_HEARTBEAT_SECS=30; URL_B=$URL; PID_B=$PID
row --server "$URL_A" --server "$URL_B" --devices 200 --devices-per-account 10 --rate 200 --duration "$SECS" --label "2 replicas 200 jobs/s"
row --server "$URL_A" --server "$URL_B" --devices 200 --devices-per-account 10 --rate 1000 --duration "$LIFECYCLE_SECS" --label "2 replicas 1,000 jobs/s"
# Kill replica B part-way through: its devices move to A; no job may be lost or run twice.
( sleep $((SECS / 2 + 5)); kill -9 "$PID_B" ) &
row --server "$URL_A" --server "$URL_B" --devices 300 --devices-per-account 10 --rate 50 --duration "$SECS" --label "2 replicas, B killed mid-run"
# Revocations go to replica A; the devices streaming from B (a fresh one) learn through Redis.
start_server replica-b2 TETHER_DATABASE_URL="$PGURL" TETHER_REDIS_URL="$REDISURL"; URL_B=$URL
row --server "$URL_A" --server "$URL_B" --devices 300 --devices-per-account 10 --rate 20 --duration "$SECS" --job-ms 2000 --revoke 30 --label "2 replicas revoke 30 of 300"

{
  echo "# Load test results"
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); run on $(date -u +%Y-%m-%d)."
  echo
  echo "Ceilings measured in this run: pgbench single-row UPDATE on the same PostgreSQL: $TPS_1 tps with 1 client, $TPS_8 tps with 8."
  echo
  echo "## Heartbeats under wrk (2 threads, 64 connections, ${WRK_SECS} s after a 3 s warm-up)"
  echo
  echo "| run | requests/s | p50 ms | p99 ms | errors | CPU s wrk / server of window s |"
  echo "|---|---|---|---|---|---|"
  cat "$OUT.wrk"
  echo
  echo "## Simulated fleets (tether-loadtest)"
  echo
  "$LOAD" --print-header
  cat "$OUT.rows"
  if [ -s "$OUT.notes" ]; then echo; cat "$OUT.notes"; fi
  if [ -s "$OUT.stream" ]; then
    echo
    echo "## Streaming output (tether-stream, ${STREAM_SECS} s of sending)"
    echo
    "$STREAM" --print-header
    cat "$OUT.stream"
  fi
} > "$OUT"
rm -f "$OUT.rows" "$OUT.notes" "$OUT.wrk"
rm -f "$OUT.stream"
cat "$OUT"
