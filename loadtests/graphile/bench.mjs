// graphile-worker doing what a Tether load test's job lifecycle does, on a PostgreSQL of your
// choosing, and what it cost: one markdown row for loadtests/run.sh's "cost per job" table.
//
//   node loadtests/graphile/bench.mjs --connection postgres://tether@127.0.0.1:5432/graphile \
//       --rate 200 --duration 10 --concurrency 16 --lines 1 --label "graphile-worker 200 jobs/s" \
//       --database-pid "$(head -1 "$PGDATA/postmaster.pid")" [--window-hook COMMAND] [--print-header]
//
// The four steps, as Tether's load test does them:
// 1. a web user creates a job: an open-loop adder calls `graphile_worker.add_job` once per job
//    from its own pool, at --rate for --duration seconds; the payload carries the add time;
// 2. a device claims it: graphile-worker's own run() (--concurrency, the default pollInterval,
//    LISTEN/NOTIFY as graphile does) fetches it;
// 3. the device sends one progress batch: the task makes one multi-row INSERT of --lines rows
//    into job_lines(job_id, seq, text, at), a table this script makes;
// 4. the device completes it: the task returns and graphile-worker deletes the job.
//
// After the window it waits until every added job is done (60 s at most), then checks that
// no job was lost or run twice from a run counter and the job_lines rows of each job. The CPU
// per job is read as tether-loadtest reads it, from the window's start until every job was
// done, divided by the jobs done: this process's (process.cpuUsage: it both adds and works)
// and the database's (the postmaster's process tree from /proc: its own time, its reaped
// children's, and its live children's). The generator column is this process's CPU in the
// window alone.
//
// --window-hook COMMAND is run with `start` appended just before the window and `settled`
// appended once every job is done, like tether-loadtest's; a `statements=N toplevel=N
// transactions=N` line in its output at `settled` fills the statements and transactions
// columns (loadtests/run.sh's hook counts them from pg_stat_statements and pg_stat_database).
import { execSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";

const HEADER =
  "| run | jobs done / added | jobs/s | add→start ms p50/p95/p99/max | add→done ms p50/p99 " +
  "| app CPU ms/job (Tether: server; graphile: node, which also adds) | database CPU ms/job " +
  "| total CPU ms/job (window start → all done, per job done) | statements/job top-level (with nested) | transactions/job " +
  "| lost / twice | generator CPU s / window s (graphile: the same node) |\n" +
  "|---|---|---|---|---|---|---|---|---|---|---|---|";

const { values: options } = parseArgs({
  options: {
    connection: { type: "string" },
    rate: { type: "string", default: "200" },
    duration: { type: "string", default: "10" },
    concurrency: { type: "string", default: "16" },
    lines: { type: "string", default: "1" },
    label: { type: "string", default: "graphile-worker" },
    "database-pid": { type: "string" },
    "window-hook": { type: "string" },
    "print-header": { type: "boolean", default: false },
  },
});
if (options["print-header"]) {
  console.log(HEADER);
  process.exit(0);
}
if (!options.connection) {
  console.error("--connection URL is needed");
  process.exit(2);
}
// Imported only now, so that --print-header works before `npm ci`.
const { Logger, run, runMigrations } = await import("graphile-worker");
const { default: pg } = await import("pg");

const rate = Number(options.rate);
const durationSecs = Number(options.duration);
const concurrency = Number(options.concurrency);
const lineCount = Number(options.lines);
const databasePid = options["database-pid"] ? Number(options["database-pid"]) : null;
const connectionString = options.connection;

/** Milliseconds on one clock for this process. */
const now = () => performance.now();

// Warnings and errors only: graphile-worker logs every job at info.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
});

// ---- CPU ------------------------------------------------------------------------------------

const CLOCK_TICKS = (() => {
  try {
    return Number(execSync("getconf CLK_TCK").toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** The fields of /proc/PID/stat after the command name (which may hold spaces). */
function statFields(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

/** The live children of a process: /proc/PID/task/*\/children, else a scan of /proc. */
function childPids(pid) {
  let lists = [];
  try {
    lists = readdirSync(`/proc/${pid}/task`).flatMap((task) => {
      try {
        return [readFileSync(`/proc/${pid}/task/${task}/children`, "utf8")];
      } catch {
        return [];
      }
    });
  } catch {
    return [];
  }
  if (lists.length > 0) return lists.join(" ").split(/\s+/).filter(Boolean).map(Number);
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .filter((candidate) => Number(statFields(candidate)?.[1]) === pid);
}

/**
 * CPU seconds a process tree has used so far: the process's utime+stime+cutime+cstime (a
 * PostgreSQL backend that ended lands in cutime/cstime) plus its live children's utime+stime.
 * The parent is read last, so a child that ends in between is not lost.
 */
function processTreeCpuSecs(pid) {
  let ticks = 0;
  for (const child of childPids(pid)) {
    const fields = statFields(child);
    if (fields) ticks += Number(fields[11]) + Number(fields[12]);
  }
  const own = statFields(pid);
  if (!own) return null;
  ticks += Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
  return ticks / CLOCK_TICKS;
}

/** This process's user + system CPU seconds (every thread). */
function nodeCpuSecs() {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

// ---- The jobs -------------------------------------------------------------------------------

/** Per graphile job id: added (ms), started (first run, ms), done (its delete returned, ms), runs. */
const jobs = new Map();
const job = (id) => {
  let times = jobs.get(id);
  if (!times) {
    times = { added: null, started: null, done: null, runs: 0 };
    jobs.set(id, times);
  }
  return times;
};

/**
 * A pg client that notes when graphile-worker's completion (the DELETE of the job's row)
 * returned: that is "done", as a Tether job is done when its complete call is answered.
 * graphile-worker completes a job after its task returned without waiting for it, so no event
 * says when.
 */
class ObservedClient extends pg.Client {
  query(config, values, callback) {
    const result = super.query(config, values, callback);
    const text = typeof config === "object" && config !== null ? config.text : null;
    if (
      typeof text === "string" &&
      /^delete from .*_private_jobs/s.test(text) &&
      result &&
      typeof result.then === "function"
    ) {
      const first = config.values?.[0];
      const ids = Array.isArray(first) ? first : [first];
      result.then(
        () => {
          const at = now();
          for (const id of ids) job(String(id)).done ??= at;
        },
        () => {},
      );
    }
    return result;
  }
}

/** What a Tether device does with a job between claiming and completing it. */
async function lifecycle(payload, helpers) {
  const id = String(helpers.job.id);
  const times = job(id);
  times.runs += 1;
  times.started ??= now();
  times.added ??= payload.addedAt;
  const seqs = Array.from({ length: lineCount }, (_, index) => index + 1);
  await helpers.query(
    "insert into job_lines (job_id, seq, text, at) " +
      "select $1::bigint, l.seq, l.text, now() from unnest($2::int[], $3::text[]) as l(seq, text)",
    [id, seqs, seqs.map(() => "working")],
  );
}

// ---- The run --------------------------------------------------------------------------------

/** Adds jobs open-loop at `perSec` for `secs`; resolves once every add has answered. */
async function addAtRate(pool, perSec, secs, ids) {
  const start = now();
  const deadline = start + secs * 1000;
  const pending = [];
  let sent = 0;
  let failed = 0;
  // Arrivals on a fixed schedule: a slow answer never delays the next add, and a late timer
  // sends what is due at once (like tether-loadtest's burst ticks).
  while (now() < deadline) {
    const due = Math.floor(((now() - start) / 1000) * perSec) + 1;
    while (sent < due) {
      sent += 1;
      const addedAt = now();
      pending.push(
        pool
          .query({
            name: "add_job",
            text: "select (graphile_worker.add_job('lifecycle', $1::json)).id",
            values: [JSON.stringify({ addedAt, n: sent })],
          })
          .then(
            ({ rows }) => {
              const id = String(rows[0].id);
              const times = job(id);
              times.added = addedAt;
              ids.push(id);
            },
            (error) => {
              failed += 1;
              if (failed <= 3) console.error(`add_job failed: ${error.message}`);
            },
          ),
      );
    }
    const next = start + (sent / perSec) * 1000;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - now())));
  }
  await Promise.all(pending);
  return failed;
}

async function waitDone(ids, limitMs) {
  const deadline = now() + limitMs;
  while (now() < deadline && ids.some((id) => job(id).done === null)) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function runHook(phase) {
  const command = options["window-hook"];
  if (!command) return "";
  return execSync(`${command} ${phase}`, { stdio: ["ignore", "pipe", "inherit"] }).toString();
}

/** Percentile q of sorted samples, as tether-loadtest takes it. */
function percentile(sorted, q) {
  if (sorted.length === 0) return 0;
  const index = Math.min(Math.max(Math.ceil(sorted.length * q), 1), sorted.length) - 1;
  return sorted[index];
}

async function main() {
  await runMigrations({ connectionString, logger });
  const setup = new pg.Client({ connectionString });
  await setup.connect();
  await setup.query(
    "create table if not exists job_lines (job_id bigint not null, seq int not null, " +
      "text text not null, at timestamptz not null)",
  );
  // Not unique, so a job run twice shows as twice the rows; the same index Tether's
  // job_events has for its primary key.
  await setup.query("create index if not exists job_lines_job on job_lines (job_id, seq)");
  await setup.query("truncate job_lines");

  // The web user's own pool (pg's default size), and the worker's: graphile-worker's
  // default of 10 connections, or concurrency + 1 (the LISTEN connection) if that is more.
  const addPool = new pg.Pool({ connectionString, max: 10 });
  const workerPool = new pg.Pool({
    connectionString,
    max: Math.max(10, concurrency + 1),
    Client: ObservedClient,
  });
  for (const pool of [addPool, workerPool]) {
    pool.on("error", (error) => console.error(`idle pool client: ${error.message}`));
  }
  const runner = await run({
    pgPool: workerPool,
    concurrency,
    noHandleSignals: true,
    logger,
    taskList: { lifecycle },
  });

  // A second's warm-up, outside the window: every pooled connection open and its statements
  // prepared, as the Tether server's are by the fleet's pairing and heartbeats.
  const warmIds = [];
  await addAtRate(addPool, Math.min(rate, 200), 1, warmIds);
  await waitDone(warmIds, 30_000);

  runHook("start");
  const ids = [];
  const windowStart = now();
  const database0 = databasePid ? processTreeCpuSecs(databasePid) : null;
  const node0 = nodeCpuSecs();
  const failedAdds = await addAtRate(addPool, rate, durationSecs, ids);
  const node1 = nodeCpuSecs();
  const windowEnd = now();
  await waitDone(ids, 60_000);
  const nodeDone = nodeCpuSecs();
  const databaseDone = databasePid ? processTreeCpuSecs(databasePid) : null;
  const hookOutput = runHook("settled");

  const { rows } = await setup.query(
    "select job_id::text as id, count(*)::int as n from job_lines where job_id = any($1::bigint[]) group by job_id",
    [ids],
  );
  const lineRows = new Map(rows.map((row) => [row.id, row.n]));
  await runner.stop();
  await Promise.all([addPool.end(), workerPool.end(), setup.end()]);

  const added = ids.length;
  let done = 0;
  let lost = 0;
  let twice = 0;
  const toStart = [];
  const toDone = [];
  for (const id of ids) {
    const times = job(id);
    const lines = lineRows.get(id) ?? 0;
    if (times.runs > 1 || lines > lineCount) twice += 1;
    if (times.done === null || lines < lineCount) {
      lost += 1;
      continue;
    }
    done += 1;
    toStart.push(times.started - times.added);
    toDone.push(times.done - times.added);
  }
  toStart.sort((a, b) => a - b);
  toDone.sort((a, b) => a - b);
  const windowSecs = (windowEnd - windowStart) / 1000;
  const perJob = (secs) => (secs === null || done === 0 ? null : (secs * 1000) / done);
  const nodeMs = perJob(nodeDone - node0);
  const databaseMs = perJob(database0 === null || databaseDone === null ? null : databaseDone - database0);
  const totalMs = nodeMs !== null && databaseMs !== null ? nodeMs + databaseMs : null;
  const counted = (key) => {
    const match = hookOutput.match(new RegExp(`\\b${key}=(\\d+)`));
    return match ? Number(match[1]) : null;
  };
  const statements = counted("statements");
  const toplevel = counted("toplevel");
  const transactions = counted("transactions");
  const fixed = (value, digits) => (value === null || done === 0 ? "-" : value.toFixed(digits));
  const ms = (value) => value.toFixed(1);
  const cells = [
    options.label,
    `${done} / ${added}${failedAdds ? ` (${failedAdds} adds failed)` : ""}`,
    (done / Math.max(windowSecs, 0.001)).toFixed(0),
    [0.5, 0.95, 0.99, 1].map((q) => ms(percentile(toStart, q))).join(" / "),
    [0.5, 0.99].map((q) => ms(percentile(toDone, q))).join(" / "),
    fixed(nodeMs, 2),
    fixed(databaseMs, 2),
    fixed(totalMs, 2),
    toplevel === null || done === 0
      ? "-"
      : `${(toplevel / done).toFixed(1)} (${(statements / done).toFixed(1)})`,
    transactions === null || done === 0 ? "-" : (transactions / done).toFixed(1),
    `${lost} / ${twice}`,
    `${(node1 - node0).toFixed(1)} / ${windowSecs.toFixed(0)}`,
  ];
  console.log(HEADER);
  console.log(`| ${cells.join(" | ")} |`);
  if (lost > 0 || twice > 0 || failedAdds > 0) process.exitCode = 1;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
