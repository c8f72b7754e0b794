#!/usr/bin/env bash
# Runs Tether's standard load scenarios on this machine and writes a markdown table.
#
#   loadtests/run.sh [OUT.md]        (default: loadtests/results.md)
#   QUICK=1 loadtests/run.sh         smaller fleets, for a first look
#   ONLY=cost loadtests/run.sh       only the cost-per-job comparison (no ceilings, no wrk);
#                                    COST_RATES="200" picks its rates (default "200 1000")
#   ONLY=replicas loadtests/run.sh   the cost rows at 200 jobs/s and the same on two replicas
#                                    with Redis: the capacity model's check
#   ONLY=stream loadtests/run.sh     only the streaming-output rows
#   ONLY=idle loadtests/run.sh       only the idle fleet and its connect storm
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
#   job pages (PostgreSQL, one replica), and 200 jobs with 100 watchers on SQLite;
# - an idle fleet of IDLE_DEVICES (default 100,000) on one replica and the connect storm of all
#   of them, or the largest fleet the machine's open-files limit fits, extrapolated;
# - cost per job lifecycle on PostgreSQL at 200 and 1,000 jobs/s: Tether (server + database
#   CPU ms per job, statements and transactions per job) beside graphile-worker (npm) doing the
#   same four steps on a fresh database of the same PostgreSQL (loadtests/graphile).
# Every row gives the CPU seconds the load generator (tether-loadtest or wrk) and the server
# used, so a reader can tell which side saturated. PostgreSQL and Redis are started privately
# from the machine's binaries on loopback and removed afterwards; wrk comes from Debian
# (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."

# pg_window PGBIN PORT DB DIR start|settled: the window hook of the cost rows
# (tether-loadtest's and bench.mjs's --window-hook), which counts PostgreSQL's statements and
# transactions in DB from the window's start until every job is done. At `start`: wait for the
# counters to settle, reset pg_stat_statements and note pg_stat_database's transactions. At
# `settled`: note the statements (top-level, and with nested ones: track=all) and the top 15
# by calls, wait for the counters again and note the transactions; print the counts. It
# connects to the `postgres` database, so its own statements and transactions are not DB's.
# A backend publishes its transaction counts at most once a second, and an idle one only
# after 10 s: hence the STATS_FLUSH_SECS wait on each side.
STATS_FLUSH_SECS=11
pg_window() {
  local bin=$1 port=$2 db=$3 dir=$4 phase=$5
  local psql=("$bin/psql" -h 127.0.0.1 -p "$port" -U tether -d postgres -XAtq -v ON_ERROR_STOP=1)
  local xacts="SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$db'"
  local mine="FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')"
  case $phase in
    start)
      sleep "$STATS_FLUSH_SECS"
      "${psql[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null
      "${psql[@]}" -c "$xacts" > "$dir/xacts-start" ;;
    settled)
      "${psql[@]}" -F ' ' -c "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0), coalesce(sum(calls), 0) $mine" > "$dir/statements"
      "${psql[@]}" -F $'\t' -c "SELECT calls, round(mean_exec_time::numeric, 3), toplevel,
          replace(left(regexp_replace(query, '\s+', ' ', 'g'), 100), '|', '\|') $mine ORDER BY calls DESC LIMIT 15" > "$dir/top"
      sleep "$STATS_FLUSH_SECS"
      "${psql[@]}" -c "SELECT coalesce(sum(calls), 0) $mine" > "$dir/statements-after"
      "${psql[@]}" -c "$xacts" > "$dir/xacts-settled"
      local toplevel all
      read -r toplevel all < "$dir/statements"
      echo "statements=$all toplevel=$toplevel transactions=$(( $(cat "$dir/xacts-settled") - $(cat "$dir/xacts-start") ))" \
           "flush_wait_statements=$(( $(cat "$dir/statements-after") - all ))" | tee "$dir/counts" ;;
    *) echo "pg_window: start or settled, not $phase" >&2; return 2 ;;
  esac
}
if [ "${1:-}" = --pg-window ]; then shift; pg_window "$@"; exit; fi

# cpu_window DIR PID… start|settled: each PID's CPU seconds so far (/proc/PID/stat, utime +
# stime), one per line into DIR/cpu-start or DIR/cpu-settled: the two-replica row's
# --window-hook, which tether-loadtest runs just before its window and once every job is done.
cpu_window() {
  local dir=$1 phase=${*: -1} ticks pid
  ticks=$(getconf CLK_TCK)
  for pid in "${@:2:$#-2}"; do
    # The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    sed 's/.*) //' "/proc/$pid/stat" | awk -v ticks="$ticks" '{ print ($12 + $13) / ticks }'
  done > "$dir/cpu-$phase"
}
if [ "${1:-}" = --cpu-window ]; then shift; cpu_window "$@"; exit; fi

OUT=${1:-loadtests/results.md}
QUICK=${QUICK:-0}
ONLY=${ONLY:-}
if [ "$ONLY" = cost ] && [ -z "${1:-}" ]; then OUT=loadtests/results-cost.md; fi
if [ "$ONLY" = replicas ] && [ -z "${1:-}" ]; then OUT=loadtests/results-replicas.md; fi
if [ "$ONLY" = stream ] && [ -z "${1:-}" ]; then OUT=loadtests/results-stream.md; fi
if [ "$ONLY" = idle ] && [ -z "${1:-}" ]; then OUT=loadtests/results-idle.md; fi

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
    -o "-p $PGPORT -k $PGDATA -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on -c synchronous_commit=on -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" start >/dev/null
  PGPID=$(head -1 "$PGDATA/postmaster.pid")
  # pg_stat_statements in template1 (so in every database made from now on) and in postgres,
  # where pg_window reads it.
  for db in template1 postgres; do
    "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U tether -d "$db" -Xq -c 'CREATE EXTENSION pg_stat_statements' >/dev/null
  done
  run_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U tether tether
  PGURL="postgres://tether@127.0.0.1:$PGPORT/tether"
}

start_redis() {
  REDISPORT=$(free_port)
  redis-server --port "$REDISPORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
  REDISPID=$!; PIDS+=("$REDISPID")
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

# program_row PROGRAM DEST ARGS…: the last table row PROGRAM prints, appended to DEST; its
# whole output is left in RUN_OUTPUT. A run that fails (say, a fleet that cannot connect) gets
# a row saying why, and the rest go on.
program_row() {
  local program=$1 dest=$2 label=run previous=""
  shift 2
  for arg in "$@"; do [ "$previous" = --label ] && label=$arg; previous=$arg; done
  if ! RUN_OUTPUT=$("$program" "$@" 2>&1); then
    echo "| $label | failed: $(grep -m1 '^Error' <<<"$RUN_OUTPUT" | tr '|' '/') |" | tee -a "$dest"
    return 0
  fi
  grep '^| ' <<<"$RUN_OUTPUT" | tail -1 | tee -a "$dest"
}

# row ARGS…: one tether-loadtest row; a revocation run's "revocation (…): …" line goes under
# the table.
row() {
  program_row "$LOAD" "$OUT.rows" "$@"
  grep '^revocation' <<<"$RUN_OUTPUT" | tee -a "$OUT.notes" || true
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

# ---- Cost per job lifecycle, same PostgreSQL ------------------------------------------------
# Tether and graphile-worker (loadtests/graphile) doing the same four steps per job: a web user
# creates it, a worker claims it, sends one progress batch of one line and completes it; each on
# a fresh database of the private PostgreSQL, at the same rate for the same time. A row gives
# the CPU ms per job of the application (Tether's server; graphile's node, which adds too) and
# of the database (the postmaster's process tree), and PostgreSQL statements and transactions
# per job (pg_window); the statements with the most calls go into the profile under the table.
GRAPHILE=unknown
GRAPHILE_CONCURRENCY=${GRAPHILE_CONCURRENCY:-16}
COST_RATES=${COST_RATES:-200 1000}

# graphile_installed: `npm ci` of loadtests/graphile, once per run (offline, npm's cache will
# do); false when it failed.
graphile_installed() {
  if [ "$GRAPHILE" = unknown ]; then
    if (cd loadtests/graphile && timeout 600 npm ci --prefer-offline --no-audit --no-fund) >"$WORK/npm-ci.log" 2>&1
    then GRAPHILE=installed; else GRAPHILE=missing; fi
  fi
  [ "$GRAPHILE" = installed ]
}

# fresh_database NAME: an empty database (with pg_stat_statements, from template1).
fresh_database() {
  run_pg "$PGBIN/dropdb" -h 127.0.0.1 -p "$PGPORT" -U tether --if-exists "$1" 2>/dev/null
  run_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U tether "$1"
}

# pg_window_hook DB DIR: the --window-hook command that runs pg_window for DB into DIR.
pg_window_hook() { echo "bash loadtests/run.sh --pg-window $PGBIN $PGPORT $1 $2"; }

# cost_profile LABEL DIR JOBS: what pg_window counted in DIR, per job, and its top
# statements, for the results' profile section.
cost_profile() {
  local label=$1 dir=$2 jobs=$3
  [ -s "$dir/counts" ] && [ "${jobs:-0}" -gt 0 ] || return 0
  {
    echo "#### $label"
    echo
    tr ' ' '\n' < "$dir/counts" | awk -F= -v jobs="$jobs" -v wait="$STATS_FLUSH_SECS" '
      { n[$1] = $2 }
      END {
        printf "%d jobs done. Statements: %d top-level (%.1f per job), %d with nested ones (%.1f per job). ", jobs, n["toplevel"], n["toplevel"] / jobs, n["statements"], n["statements"] / jobs
        printf "Transactions: %d (%.1f per job), read %d s after the last job was done, in which %d more statements ran (%.2f per job; counted in the transactions only).\n", n["transactions"], n["transactions"] / jobs, wait, n["flush_wait_statements"], n["flush_wait_statements"] / jobs
      }'
    echo
    echo "| calls | per job | mean ms | top-level | statement (first 100 characters) |"
    echo "|---|---|---|---|---|"
    awk -F'\t' -v jobs="$jobs" '{ printf "| %d | %.2f | %s | %s | `%s` |\n", $1, $1 / jobs, $2, ($3 == "t" ? "yes" : "nested"), $4 }' "$dir/top"
    echo
  } >> "$OUT.profile"
}

# tether_cost_row REPORT_JSON COUNTS: tether-loadtest's --json report as a cost-table row.
tether_cost_row() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys
report = json.load(open(sys.argv[1]))
counts = dict(pair.split("=") for pair in open(sys.argv[2]).read().split()) if os.path.exists(sys.argv[2]) else {}
done = report["succeeded"]
cpu, secs = report["cpuMsPerJob"], report["cpuSecs"]
def ms(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"
def per_job(key):
    return int(counts[key]) / done if key in counts and done else None
claim, finish = report["assignToClaimMs"], report["assignToDoneMs"]
errors = sum(report["errors"].values())
statements = "-" if per_job("toplevel") is None else f'{per_job("toplevel"):.1f} ({per_job("statements"):.1f})'
print(" | ".join([
    f'| {report["label"]}',
    f'{done} / {report["jobs"]}' + (f" ({errors} errors)" if errors else ""),
    f'{report["jobsPerSec"]:.0f}',
    " / ".join(f"{claim[q]:.1f}" for q in ("p50", "p95", "p99", "max")),
    f'{finish["p50"]:.1f} / {finish["p99"]:.1f}',
    ms(cpu["server"]), ms(cpu["database"]), ms(cpu["total"]),
    statements, ms(per_job("transactions"), 1),
    f'{report["lost"]} / {report["rerun"] + report["duplicatedClaims"]}',
    f'{ms(secs["generator"], 1)} / {secs["window"]:.0f} |',
]))
PY
}

# cost_rows RATE SECS: the Tether row and right after it the graphile-worker row, at RATE
# jobs/s for SECS s, each on its own fresh database.
cost_rows() {
  local rate=$1 secs=$2 label db dir out row
  label="Tether $rate jobs/s"; db=cost_tether_$rate; dir=$WORK/$db-counts
  mkdir -p "$dir"; fresh_database "$db"
  start_server "$db" TETHER_DATABASE_URL="postgres://tether@127.0.0.1:$PGPORT/$db" TETHER_HEARTBEAT_SECS=30
  if "$LOAD" --server "$URL" --devices 200 --devices-per-account 10 --rate "$rate" --duration "$secs" \
      --server-pid "$PID" --database-pid "$PGPID" --window-hook "$(pg_window_hook "$db" "$dir")" \
      --json --label "$label" >"$dir/report.json" 2>"$dir/log"; then
    tether_cost_row "$dir/report.json" "$dir/counts" | tee -a "$OUT.cost"
    cost_profile "$label" "$dir" "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["succeeded"])' "$dir/report.json")"
  else
    echo "| $label | failed: $(grep -m1 '^Error' "$dir/log" | tr '|' '/') |" | tee -a "$OUT.cost"
  fi
  kill -9 "$PID"

  label="graphile-worker $rate jobs/s"; db=cost_graphile_$rate; dir=$WORK/$db-counts
  if ! graphile_installed; then
    echo "| $label | graphile-worker not installed: npm ci failed ($(tail -1 "$WORK/npm-ci.log" | tr '|' '/')) |" | tee -a "$OUT.cost"
    return 0
  fi
  mkdir -p "$dir"; fresh_database "$db"
  # Its exit status says whether a job was lost or ran twice; the row says so too.
  out=$(node loadtests/graphile/bench.mjs --connection "postgres://tether@127.0.0.1:$PGPORT/$db" \
      --rate "$rate" --duration "$secs" --concurrency "$GRAPHILE_CONCURRENCY" --lines 1 --label "$label" \
      --database-pid "$PGPID" --window-hook "$(pg_window_hook "$db" "$dir")" 2>"$dir/log") || true
  row=$(grep '^| ' <<<"$out" | tail -1)
  if [ -z "$row" ]; then
    echo "| $label | failed: $( { grep -m1 -i 'error' "$dir/log" || tail -1 "$dir/log"; } | tr '|' '/') |" | tee -a "$OUT.cost"
    return 0
  fi
  echo "$row" | tee -a "$OUT.cost"
  cost_profile "$label" "$dir" "$(awk -F'|' '{ split($3, done, "/"); print done[1] + 0 }' <<<"$row")"
}

# cost_section: the cost rows at each of COST_RATES (1,000 jobs/s and more for the lifecycle
# rows' LIFECYCLE_SECS, less for SECS), on the private PostgreSQL.
cost_section() {
  echo "== cost per job lifecycle, same PostgreSQL: Tether and graphile-worker"
  local rate
  for rate in $COST_RATES; do
    if [ "$rate" -ge 1000 ]; then cost_rows "$rate" "$LIFECYCLE_SECS"; else cost_rows "$rate" "$SECS"; fi
  done
}

# replicas_section: the capacity model's check (docs/CAPACITY.md). The Tether cost row's
# lifecycle at 200 jobs/s, on two replicas of one PostgreSQL with Redis between them: CPU per
# job of each replica, of Redis and of PostgreSQL, to set beside the one-replica row.
replicas_section() {
  echo "== two replicas, the capacity model's check"
  local db=replicas dir=$WORK/replicas url url_a pid_a
  mkdir -p "$dir"; fresh_database "$db"; [ -n "${REDISPID:-}" ] || start_redis
  url="postgres://tether@127.0.0.1:$PGPORT/$db"
  start_server replicas-a TETHER_DATABASE_URL="$url" TETHER_REDIS_URL="$REDISURL" TETHER_HEARTBEAT_SECS=30
  url_a=$URL; pid_a=$PID
  start_server replicas-b TETHER_DATABASE_URL="$url" TETHER_REDIS_URL="$REDISURL" TETHER_HEARTBEAT_SECS=30
  if "$LOAD" --server "$url_a" --server "$URL" --devices 200 --devices-per-account 10 --rate 200 \
      --duration "$SECS" --database-pid "$PGPID" \
      --window-hook "bash loadtests/run.sh --cpu-window $dir $pid_a $PID $REDISPID" \
      --json --label "2 replicas 200 jobs/s" >"$dir/report.json" 2>"$dir/log"; then
    python3 - "$dir" <<'PY' | tee -a "$OUT.replicas"
import json, sys
folder = sys.argv[1]
report = json.load(open(f"{folder}/report.json"))
done = report["succeeded"]
start, end = ([float(v) for v in open(f"{folder}/cpu-{phase}").read().split()] for phase in ("start", "settled"))
replica_a, replica_b, redis = ((after - before) * 1000 / done for before, after in zip(start, end))
database = report["cpuMsPerJob"]["database"]
claim = report["assignToClaimMs"]
print(" | ".join([
    f'| {report["label"]}', f'{done} / {report["jobs"]}',
    f'{claim["p50"]:.1f} / {claim["p99"]:.1f}',
    f"{replica_a:.2f} + {replica_b:.2f} = {replica_a + replica_b:.2f}", f"{redis:.2f}",
    f"{database:.2f}", f"{replica_a + replica_b + redis + database:.2f}",
    f'{report["lost"]} / {report["rerun"] + report["duplicatedClaims"]}',
    f'{report["cpuSecs"]["generator"]:.1f} / {report["cpuSecs"]["window"]:.0f} |',
]))
PY
  else
    echo "| 2 replicas 200 jobs/s | failed: $(grep -m1 '^Error' "$dir/log" | tr '|' '/') |" | tee -a "$OUT.replicas"
  fi
  kill -9 "$pid_a" "$PID"
}

# replicas_results: the two-replica table, for the results file.
replicas_results() {
  [ -s "$OUT.replicas" ] || return 0
  echo
  echo "## Two replicas, the capacity model's check"
  echo
  echo "The Tether row of the cost table's lifecycle at 200 jobs/s, with devices spread over two replicas of one PostgreSQL and Redis between them."
  echo "CPU from the window's start until every job was done, per job done; compare the sum with the one-replica Tether row above (docs/CAPACITY.md)."
  echo
  echo "| run | jobs done / added | add→start ms p50 / p99 | replicas A + B CPU ms/job | Redis ms/job | database ms/job | total ms/job | lost / twice | generator CPU s / window s |"
  echo "|---|---|---|---|---|---|---|---|---|"
  cat "$OUT.replicas"
}

# cost_results: the cost table and its profile, for the results file.
cost_results() {
  [ -s "$OUT.cost" ] || return 0
  echo
  echo "## Cost per job lifecycle, same PostgreSQL"
  echo
  echo "Each row on a fresh database of the same PostgreSQL (fsync and synchronous_commit on; pg_stat_statements loaded, track=all)."
  echo "The four steps: a web user creates a job, a worker claims it, sends one progress batch of one line, completes it."
  echo "Tether: tether-loadtest (200 devices over 20 accounts, heartbeats every 30 s) against tether-server; CPU of the server."
  echo "graphile-worker $(node -p 'require("./loadtests/graphile/package.json").dependencies["graphile-worker"]' 2>/dev/null || echo '?'):"
  echo "loadtests/graphile/bench.mjs (add_job from its own pool, run() with concurrency $GRAPHILE_CONCURRENCY, one INSERT into job_lines per job); CPU of the node process, which both adds and works."
  echo "CPU, statements and transactions from the window's start until every job was done, per job done; database CPU is the postmaster's process tree (see loadtests/README.md, and the profile below)."
  echo
  node loadtests/graphile/bench.mjs --print-header 2>/dev/null || echo "(node is missing: the columns are those of loadtests/graphile/bench.mjs's header)"
  cat "$OUT.cost"
  if [ -s "$OUT.profile" ]; then
    echo
    echo "### Profile: PostgreSQL statements per job lifecycle"
    echo
    cat "$OUT.profile"
  fi
}

if [ "$QUICK" = 1 ]; then SECS=10; WRK_SECS=10; GROWTH="100 1000"; LIFECYCLE_SECS=10
else SECS=20; WRK_SECS=20; GROWTH="100 1000 10000"; LIFECYCLE_SECS=30; fi
: > "$OUT.cost"; : > "$OUT.profile"; : > "$OUT.replicas"

# stream_row ARGS…: one tether-stream row.
stream_row() {
  program_row "$STREAM" "$OUT.stream" "$@"
}

# stream_section: the streaming rows (PostgreSQL 1,000 jobs and 500 watchers; SQLite 200 and 100).
stream_section() {
  echo "== streaming output: jobs sending lines while browsers watch (PostgreSQL, one replica; SQLite)"
  # tether-stream: every job claimed by its own device sends 20 lines/s in the agent's batches
  # (one per 250 ms); watchers follow job pages on their event streams. On its own database, and
  # with the heartbeat at its default pace so heartbeats stay a small part of the load.
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
}

# stream_results: the streaming rows' section of the report.
stream_results() {
  if [ -s "$OUT.stream" ]; then
    echo
    echo "## Streaming output (tether-stream, ${STREAM_SECS} s of sending)"
    echo
    "$STREAM" --print-header
    cat "$OUT.stream"
  fi
}

# idle_section: an idle fleet of IDLE_DEVICES on one replica and its connect storm.
idle_section() {
  echo "== an idle fleet on one replica (PostgreSQL) and its connect storm"
  # tether-idle pairs the fleet, then every device connects at once with the agent's backoff and
  # jitter, then a steady window. A fleet past what this machine's open-files limit lets one
  # server hold runs at the largest size that fits (--fit) and is extrapolated per device.
  IDLE_DEVICES=${IDLE_DEVICES:-100000}; [ "$QUICK" = 1 ] && IDLE_DEVICES=2000
  : > "$OUT.idle"
  run_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U tether idle
  start_server idle TETHER_DATABASE_URL="postgres://tether@127.0.0.1:$PGPORT/idle" TETHER_HEARTBEAT_SECS=30
  # The window outlasts the idle pace (300 s), so each device's next heartbeat falls in it.
  IDLE_WINDOW_SECS=${IDLE_WINDOW_SECS:-330}; [ "$QUICK" = 1 ] && IDLE_WINDOW_SECS=30
  if ! target/release/tether-idle --server "$URL" --server-pid "$PID" --devices "$IDLE_DEVICES" --fit \
      --window-secs "$IDLE_WINDOW_SECS" \
      --label "PostgreSQL, $IDLE_DEVICES asked" >"$OUT.idle" 2>"$WORK/idle-run.log"; then
    echo "tether-idle failed: $(grep -m1 '^Error' "$WORK/idle-run.log")" >> "$OUT.idle"
  fi
  # What it ran (--fit) and where the storm stood when it last said.
  { grep -h 'Running' "$WORK/idle-run.log"; grep 'storm:' "$WORK/idle-run.log" | tail -1; } >> "$OUT.idle" || true
  cat "$OUT.idle"
  kill -9 "$PID"
}

# idle_results: the idle fleet's section of the report.
idle_results() {
  if [ -s "$OUT.idle" ]; then
    echo
    echo "## An idle fleet on one replica (tether-idle, PostgreSQL)"
    echo
    cat "$OUT.idle"
  fi
}

# machine_line: the machine the report was measured on.
machine_line() {
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); run on $(date -u +%Y-%m-%d)."
}

# only_report TITLE NAME: runs NAME_section alone on a private PostgreSQL, writes OUT from
# NAME_results and ends the script.
only_report() {
  start_postgres
  "$2_section"
  { echo "# Load test results: $1"; echo; machine_line; "$2_results"; } > "$OUT"
  rm -f "$OUT.$2"
  cat "$OUT"
  exit 0
}

if [ "$ONLY" = idle ]; then only_report "an idle fleet" idle; fi
if [ "$ONLY" = stream ]; then only_report "streaming output" stream; fi
if [ "$ONLY" = cost ] || [ "$ONLY" = replicas ]; then
  start_postgres
  if [ "$ONLY" = replicas ]; then COST_RATES=200; fi
  cost_section
  if [ "$ONLY" = replicas ]; then replicas_section; fi
  {
    echo "# Load test results: cost per job"
    echo
    machine_line
    cost_results
    replicas_results
  } > "$OUT"
  rm -f "$OUT.cost" "$OUT.profile" "$OUT.replicas"
  cat "$OUT"
  exit 0
fi
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

# On the private PostgreSQL while nothing else uses it (the replicas below stay up to the end).
cost_section
replicas_section

echo "== SQLite: revocation under load"
start_server revoke
row --server "$URL" --devices 300 --devices-per-account 10 --rate 20 --duration "$SECS" --job-ms 2000 --revoke 30 --server-pid "$PID" --label "SQLite revoke 30 of 300"
kill -9 "$PID"

stream_section

idle_section

echo "== two replicas, PostgreSQL + Redis"
[ -n "${REDISPID:-}" ] || start_redis
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
  machine_line
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
  cost_results
  replicas_results
  stream_results
  idle_results
} > "$OUT"
rm -f "$OUT.rows" "$OUT.notes" "$OUT.wrk" "$OUT.idle"
rm -f "$OUT.cost" "$OUT.profile" "$OUT.replicas"
rm -f "$OUT.stream"
cat "$OUT"
