//! `tether-soak`: real agents and a real server under faults, audited at the end.
//!
//! Starts `tether-server` (SQLite in its own data dir, then PostgreSQL when `--postgres URL`
//! is given) and three `tether-agent run` processes, each paired with its own data dir, one
//! shared folder and a `counted` recipe. The recipe appends `start JOB N` and `end JOB N`
//! (N = `TETHER_RESUMED`) to `runs.txt` around a sleep, holding a lock on the job's own file
//! for as long as it runs, so a second live run of the same job writes `overlap JOB N`. One
//! agent reaches the server through a proxy in this process.
//!
//! While the jobs are assigned, faults are injected at random and printed as they happen:
//! SIGKILL of an agent (restarted), SIGKILL of the server (restarted on the same database and
//! port), SIGSTOP of an agent with a run under way past the lease then SIGCONT, and the proxy
//! resetting every connection or, while its computer has a run under way, holding them open
//! and silent past the lease.
//!
//! Then every job is read back through the API and every folder's `runs.txt` is read: no run
//! overlapped another of the same job, none was lost (every job ended), none moved computers,
//! no 5xx (answers to the soak, and the server's own log), each attempt's side effect happened
//! once and a finished run never ran again. It prints the figures and a verdict, and exits 1
//! if the promise did not hold (the work dir is then kept; `--keep` keeps it always).
//!
//! The seed fixes every choice (which fault, on which computer, for how long, which job goes
//! where and runs how long); the timing of real processes does not repeat exactly.
//!
//! ```sh
//! cargo build -p tether-server -p tether-agent -p tether-loadtest --bins
//! target/debug/tether-soak --jobs 20 --minutes 4 [--seed N] [--postgres URL]
//! ```

#[path = "../setup.rs"]
#[allow(dead_code)] // the soak signs up through it; pairing goes through the real agent
mod setup;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::{watch, Mutex};
use tokio::task::{AbortHandle, JoinHandle};

/// The recipe every computer runs. The lock on `.lock-JOB` is held by the shell and its
/// sleep; it goes when they die, so only two runs alive at once can meet it.
const COUNTED: &str = r#"j=$TETHER_JOB_ID; n=${TETHER_RESUMED:-0}
exec 9>>".lock-$j"
flock -n 9 || echo "overlap $j $n" >> runs.txt
echo "start $j $n" >> runs.txt
sleep "$TETHER_TASK_PROMPT"
echo "end $j $n" >> runs.txt"#;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Real agents and a real server under faults, audited at the end."
)]
struct Options {
    /// Seed for every random choice (default: a random one, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Jobs per backend.
    #[arg(long, default_value_t = 60)]
    jobs: usize,
    /// Minutes of assignment and faults per backend; settling afterwards takes at most
    /// three more.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Also soak PostgreSQL at this URL (an empty database: the server migrates it).
    #[arg(long)]
    postgres: Option<String>,
    /// The server binary (default: `tether-server` beside this one).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// The agent binary (default: `tether-agent` beside this one).
    #[arg(long)]
    agent_bin: Option<PathBuf>,
    /// Paired computers, each a `tether-agent run` with its own data dir and folder.
    #[arg(long, default_value_t = 3)]
    computers: usize,
    /// The server's lease, in seconds. SIGSTOPs and holds last past it.
    #[arg(long, default_value_t = 15)]
    lease_secs: u64,
    /// Longest a job's recipe sleeps, in seconds (each draws 1..=this).
    #[arg(long, default_value_t = 10)]
    max_job_secs: u64,
    /// Mean seconds between faults.
    #[arg(long, default_value_t = 8.0)]
    fault_gap: f64,
    /// The agents' sandbox (`TETHER_SANDBOX`).
    #[arg(long, default_value = "landlock")]
    sandbox: String,
    /// Where the data dirs, folders and logs go (default: a new one under the temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the work dir (logs, folders, databases) when the promise held, too.
    #[arg(long)]
    keep: bool,
}

/// Prints a line with the seconds since the soak of this backend started.
#[derive(Clone)]
struct Clock(Instant);

impl Clock {
    fn say(&self, text: &str) {
        println!("[{:7.1} s] {text}", self.0.elapsed().as_secs_f64());
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    let seed = options.seed.unwrap_or_else(rand::random);
    println!("tether-soak seed {seed}");
    let beside = |name: &str| -> anyhow::Result<PathBuf> {
        let me = std::env::current_exe()?;
        Ok(me.with_file_name(name))
    };
    let server_bin = match &options.server_bin {
        Some(path) => path.clone(),
        None => beside("tether-server")?,
    };
    let agent_bin = match &options.agent_bin {
        Some(path) => path.clone(),
        None => beside("tether-agent")?,
    };
    for bin in [&server_bin, &agent_bin] {
        if !bin.exists() {
            bail!(
                "{} is missing: cargo build -p tether-server -p tether-agent --bins",
                bin.display()
            );
        }
    }
    let mut backends = vec![("SQLite", None)];
    if let Some(url) = &options.postgres {
        backends.push(("PostgreSQL", Some(url.clone())));
    }
    let mut held = true;
    for (index, (backend, url)) in backends.into_iter().enumerate() {
        let work = match &options.work_dir {
            Some(dir) => dir.join(backend),
            None => std::env::temp_dir().join(format!("tether-soak-{seed}-{backend}")),
        };
        std::fs::create_dir_all(&work)?;
        let rng = StdRng::seed_from_u64(seed.wrapping_add(index as u64));
        let soak = Soak {
            options: &options,
            backend,
            database_url: url,
            server_bin: server_bin.clone(),
            agent_bin: agent_bin.clone(),
            work: work.clone(),
        };
        let verdict = soak.run(rng).await?;
        if verdict && !options.keep {
            let _ = std::fs::remove_dir_all(&work);
        } else {
            println!("work dir kept: {}", work.display());
        }
        held &= verdict;
    }
    if !held {
        std::process::exit(1);
    }
    Ok(())
}

struct Soak<'a> {
    options: &'a Options,
    backend: &'static str,
    database_url: Option<String>,
    server_bin: PathBuf,
    agent_bin: PathBuf,
    work: PathBuf,
}

/// A job as assigned.
#[derive(Debug, Clone)]
struct Assigned {
    id: String,
    computer: usize,
}

/// What the run shares between the assigner, the fault loop and the audit.
struct Shared {
    clock: Clock,
    server: Mutex<Server>,
    agents: Vec<Mutex<Agent>>,
    /// Whether each computer is mid-fault (stopped), so another fault picks another.
    agent_busy: Vec<AtomicBool>,
    proxy: Proxy,
    proxy_busy: AtomicBool,
    /// 5xx answers the soak itself got.
    server_errors: AtomicUsize,
    faults: std::sync::Mutex<BTreeMap<&'static str, usize>>,
    stop_faults: AtomicBool,
}

impl Shared {
    fn count(&self, kind: &'static str) {
        *self
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kind)
            .or_default() += 1;
    }
}

impl Soak<'_> {
    /// One backend's soak; true when the promise held.
    async fn run(self, mut rng: StdRng) -> anyhow::Result<bool> {
        let options = self.options;
        let clock = Clock(Instant::now());
        println!(
            "\n== {}: {} jobs, {} computers, lease {} s, at most {} min of faults; work dir {}",
            self.backend,
            options.jobs,
            options.computers,
            options.lease_secs,
            options.minutes,
            self.work.display()
        );
        let mut server = Server {
            bin: self.server_bin.clone(),
            data_dir: self.work.join("server"),
            port: free_port()?,
            database_url: self.database_url.clone(),
            lease_secs: options.lease_secs,
            log: self.work.join("server.log"),
            child: None,
        };
        server.start().await?;
        let base = server.base();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let account = setup::accounts(&http, &base, 1)
            .await?
            .into_iter()
            .next()
            .context("no account")?;
        let web = Web {
            http,
            base: base.clone(),
            token: account.token,
        };
        let proxy = Proxy::start(&base).await?;
        let mut agents = Vec::new();
        for index in 0..options.computers {
            // The first computer reaches the server through the proxy.
            let through = if index == 0 { &proxy.base } else { &base };
            let agent = Agent::pair(&self, &web, index, through).await?;
            agents.push(agent);
        }
        for agent in &mut agents {
            agent.start()?;
        }
        web.wait_ready(&agents).await?;
        clock.say(&format!(
            "server on {base}, {} computers paired and online (computer 0 through the proxy at {})",
            agents.len(),
            proxy.base
        ));

        let shared = Arc::new(Shared {
            clock: clock.clone(),
            server: Mutex::new(server),
            agent_busy: agents.iter().map(|_| AtomicBool::new(false)).collect(),
            agents: agents.into_iter().map(Mutex::new).collect(),
            proxy,
            proxy_busy: AtomicBool::new(false),
            server_errors: AtomicUsize::new(0),
            faults: std::sync::Mutex::new(BTreeMap::new()),
            stop_faults: AtomicBool::new(false),
        });
        let bound = Duration::from_secs_f64(options.minutes * 60.0);
        let deadline = Instant::now() + bound;
        let web = Arc::new(web);
        let faults = tokio::spawn(inject_faults(
            shared.clone(),
            web.clone(),
            StdRng::seed_from_u64(rng.gen()),
            options.lease_secs,
            options.fault_gap,
            deadline,
        ));

        let assigned = assign(&shared, &web, &mut rng, options, deadline).await;
        clock.say(&format!("{} jobs assigned", assigned.len()));
        // Faults go on until every job has ended or the bound is reached.
        while Instant::now() < deadline && !web.all_ended(&assigned, &shared).await {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        shared.stop_faults.store(true, Ordering::SeqCst);
        let long_faults = faults.await.unwrap_or_default();
        for fault in long_faults {
            let _ = fault.await;
        }
        let faults_ended = clock.0.elapsed();
        clock.say("faults stopped; settling");
        // A run the sweeper ended while its computer was cut off is final to the server, yet
        // the computer, once back, reattaches it or delivers the outcome it kept: give it a
        // lease and a few heartbeats before the states count.
        tokio::time::sleep(Duration::from_secs(options.lease_secs + 15)).await;
        let settle_limit = Instant::now() + Duration::from_secs(180);
        while Instant::now() < settle_limit && !web.all_ended(&assigned, &shared).await {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let wall = clock.0.elapsed();
        let audit = audit(&web, &shared, &assigned).await;
        for agent in &shared.agents {
            agent.lock().await.kill().await;
        }
        shared.server.lock().await.kill().await;
        let server_log_errors = std::fs::read_to_string(self.work.join("server.log"))
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("answered"))
            .count();
        let faults = shared
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let client_errors = shared.server_errors.load(Ordering::SeqCst);
        Ok(audit.print(
            self.backend,
            &faults,
            client_errors,
            server_log_errors,
            wall,
            faults_ended,
        ))
    }
}

/// Assigns the jobs at random gaps over the first half of the bound (at most 4 s apart on
/// average), each to a random computer with a random length.
async fn assign(
    shared: &Shared,
    web: &Web,
    rng: &mut StdRng,
    options: &Options,
    deadline: Instant,
) -> Vec<Assigned> {
    let mean_gap = (options.minutes * 60.0 / 2.0 / options.jobs.max(1) as f64).min(4.0);
    let mut assigned = Vec::new();
    for number in 0..options.jobs {
        let computer = rng.gen_range(0..shared.agents.len());
        let secs = rng.gen_range(1..=options.max_job_secs.max(1));
        let gap = rng.gen_range(0.0..=2.0 * mean_gap);
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        if Instant::now() >= deadline {
            break;
        }
        let device_id = shared.agents[computer].lock().await.device_id.clone();
        let title = format!("soak {number}");
        match web
            .create_job(shared, &device_id, &title, secs, deadline)
            .await
        {
            Ok(id) => assigned.push(Assigned { id, computer }),
            Err(error) => shared
                .clock
                .say(&format!("job {number} not assigned: {error:#}")),
        }
    }
    assigned
}

/// Injects faults until told to stop or the deadline; returns the long faults (SIGSTOPs,
/// holds) still under way, for the caller to wait out.
async fn inject_faults(
    shared: Arc<Shared>,
    web: Arc<Web>,
    mut rng: StdRng,
    lease_secs: u64,
    mean_gap: f64,
    deadline: Instant,
) -> Vec<JoinHandle<()>> {
    let mut long = Vec::new();
    let lease = lease_secs as f64;
    loop {
        let gap = rng.gen_range(0.5 * mean_gap..=1.5 * mean_gap);
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        if shared.stop_faults.load(Ordering::SeqCst) || Instant::now() >= deadline {
            return long;
        }
        let roll = rng.gen_range(0..100);
        let computer = rng.gen_range(0..shared.agents.len());
        let pause = rng.gen_range(0.5..=3.0);
        let past_lease = rng.gen_range(lease + 3.0..=lease + 10.0);
        let say = |text: String| shared.clock.say(&format!("fault: {text}"));
        let doing = web.doing(&shared, computer).await;
        if roll < 40 {
            if shared.agent_busy[computer].load(Ordering::SeqCst) {
                continue;
            }
            let mut agent = shared.agents[computer].lock().await;
            say(format!(
                "SIGKILL computer {computer} (pid {}, {doing}), back in {pause:.1} s",
                agent.pid()
            ));
            shared.count("agent SIGKILL");
            agent.kill().await;
            tokio::time::sleep(Duration::from_secs_f64(pause)).await;
            if let Err(error) = agent.start() {
                say(format!("computer {computer} did not restart: {error:#}"));
            }
        } else if roll < 55 {
            let mut server = shared.server.lock().await;
            say(format!("SIGKILL server, back in {pause:.1} s"));
            shared.count("server SIGKILL");
            server.kill().await;
            tokio::time::sleep(Duration::from_secs_f64(pause)).await;
            match server.start().await {
                Ok(()) => shared.clock.say("server back"),
                Err(error) => say(format!("the server did not restart: {error:#}")),
            }
        } else if roll < 70 {
            // Past the lease only matters to a run under way: stop a computer that has one.
            let mut under_way = Vec::new();
            for candidate in 0..shared.agents.len() {
                let running = web.running(&shared, candidate).await;
                if !running.is_empty() && !shared.agent_busy[candidate].load(Ordering::SeqCst) {
                    under_way.push((candidate, running.join(", ")));
                }
            }
            if under_way.is_empty() {
                continue;
            }
            let (computer, running) = under_way.swap_remove(rng.gen_range(0..under_way.len()));
            let doing = format!("running {running}");
            if shared.agent_busy[computer].swap(true, Ordering::SeqCst) {
                continue;
            }
            let pid = shared.agents[computer].lock().await.pid();
            say(format!(
                "SIGSTOP computer {computer} (pid {pid}, {doing}) for {past_lease:.1} s (lease {lease_secs} s)"
            ));
            shared.count("agent SIGSTOP past the lease");
            signal("STOP", pid).await;
            let shared = shared.clone();
            long.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs_f64(past_lease)).await;
                signal("CONT", pid).await;
                shared
                    .clock
                    .say(&format!("SIGCONT computer {computer} (pid {pid})"));
                shared.agent_busy[computer].store(false, Ordering::SeqCst);
            }));
        } else if roll < 85 {
            if shared.proxy_busy.load(Ordering::SeqCst) {
                continue;
            }
            let doing = web.doing(&shared, 0).await;
            let cut = shared.proxy.reset();
            say(format!(
                "proxy resets computer 0's connections ({cut} open; {doing})"
            ));
            shared.count("proxy reset");
        } else {
            // Likewise a hold: it is the run's lease the partition must outlast.
            if web.running(&shared, 0).await.is_empty()
                || shared.proxy_busy.swap(true, Ordering::SeqCst)
            {
                continue;
            }
            let doing = web.doing(&shared, 0).await;
            say(format!(
                "proxy holds computer 0's connections open and silent for {past_lease:.1} s ({doing})"
            ));
            shared.count("proxy hold past the lease");
            shared.proxy.hold(true);
            let shared = shared.clone();
            long.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs_f64(past_lease)).await;
                shared.proxy.hold(false);
                shared.clock.say("proxy releases computer 0");
                shared.proxy_busy.store(false, Ordering::SeqCst);
            }));
        }
    }
}

/// `kill -SIG PID`; a process already gone is not an error here.
async fn signal(name: &str, pid: u32) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .await;
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Stdout and stderr appended to `path`, across restarts.
fn log_to(path: &Path) -> anyhow::Result<(Stdio, Stdio)> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    Ok((Stdio::from(file.try_clone()?), Stdio::from(file)))
}

/// `tether-server` as its own process; restarted on the same data dir, database and port.
struct Server {
    bin: PathBuf,
    data_dir: PathBuf,
    port: u16,
    database_url: Option<String>,
    lease_secs: u64,
    log: PathBuf,
    child: Option<Child>,
}

impl Server {
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn start(&mut self) -> anyhow::Result<()> {
        let (stdout, stderr) = log_to(&self.log)?;
        let mut command = Command::new(&self.bin);
        match &self.database_url {
            Some(url) => command.env("TETHER_DATABASE_URL", url),
            None => command.env_remove("TETHER_DATABASE_URL"),
        };
        let child = command
            .env("TETHER_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("TETHER_DATA_DIR", &self.data_dir)
            .env("TETHER_LEASE_SECS", self.lease_secs.to_string())
            .env("TETHER_HEARTBEAT_SECS", "2")
            .env("TETHER_SWEEP_SECS", "1")
            .env("TETHER_ONLINE_SECS", "10")
            // One machine is every computer and every user.
            .env("TETHER_RATE_LIMITS", "off")
            .env_remove("TETHER_REDIS_URL")
            .env_remove("TETHER_PUBLIC_URL")
            // At warn, the only "answered" lines are 5xx: the audit counts them.
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let healthy = http
                .get(format!("{}/healthz", self.base()))
                .send()
                .await
                .is_ok_and(|res| res.status().is_success());
            if healthy {
                return Ok(());
            }
            if let Some(child) = &mut self.child {
                if let Some(status) = child.try_wait()? {
                    bail!("the server exited ({status}); see {}", self.log.display());
                }
            }
            if Instant::now() > deadline {
                bail!("the server did not start; see {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

/// A paired computer: `tether-agent` with its own data dir and shared folder.
struct Agent {
    bin: PathBuf,
    sandbox: String,
    home: PathBuf,
    folder: PathBuf,
    log: PathBuf,
    device_id: String,
    child: Option<Child>,
}

impl Agent {
    /// Pairs a new computer through `base` (the server or the proxy) as the web user, shares
    /// its folder and adds the counted recipe.
    async fn pair(soak: &Soak<'_>, web: &Web, index: usize, base: &str) -> anyhow::Result<Agent> {
        let root = soak.work.join(format!("computer-{index}"));
        let home = root.join("home");
        let folder = root.join("work");
        std::fs::create_dir_all(&home)?;
        std::fs::create_dir_all(&folder)?;
        let mut agent = Agent {
            bin: soak.agent_bin.clone(),
            sandbox: soak.options.sandbox.clone(),
            home,
            folder,
            log: root.join("agent.log"),
            device_id: String::new(),
            child: None,
        };
        let name = format!("soak-{index}");
        let mut pairing = agent
            .command()
            .args(["pair", base, "--name", &name])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = pairing.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let code = loop {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .context("pair printed no code in time")??
                .context("pair ended before printing a code")?;
            if is_user_code(line.trim()) {
                break line.trim().to_owned();
            }
        };
        let linked = web
            .post("/api/devices/link", &json!({ "userCode": code }))
            .await?;
        agent.device_id = linked["deviceId"]
            .as_str()
            .context("no deviceId in the link answer")?
            .to_owned();
        // Drain what is left so `pair` is never blocked on a full pipe.
        while let Ok(Some(_)) = lines.next_line().await {}
        let status = tokio::time::timeout(Duration::from_secs(30), pairing.wait())
            .await
            .context("pair did not finish")??;
        if !status.success() {
            bail!("pair failed for computer {index}");
        }
        let folder = agent.folder.to_string_lossy().into_owned();
        agent.ok(&["folders", "share", "work", &folder]).await?;
        agent
            .ok(&["recipe", "add", "counted", "--", "sh", "-c", COUNTED])
            .await?;
        Ok(agent)
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .env("TETHER_AGENT_HOME", &self.home)
            .env("TETHER_SANDBOX", &self.sandbox)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn ok(&self, args: &[&str]) -> anyhow::Result<()> {
        let output = self.command().args(args).output().await?;
        if !output.status.success() {
            bail!(
                "tether-agent {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// `tether-agent run`, its output appended to the computer's log.
    fn start(&mut self) -> anyhow::Result<()> {
        let (stdout, stderr) = log_to(&self.log)?;
        let child = self
            .command()
            .arg("run")
            .stdout(stdout)
            .stderr(stderr)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().and_then(Child::id).unwrap_or(0)
    }

    /// SIGKILL, as a crash or power cut would; what the recipe left running is the restarted
    /// agent's to settle.
    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

fn is_user_code(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 9
        && bytes[4] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || b.is_ascii_uppercase())
}

/// The web user, on an API token.
struct Web {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Web {
    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        let status = res.status();
        let text = res.text().await?;
        if !status.is_success() {
            bail!("POST {path} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// GET `path`; a 5xx is counted.
    async fn get(&self, shared: Option<&Shared>, path: &str) -> anyhow::Result<Value> {
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await?;
        let status = res.status();
        if status.is_server_error() {
            if let Some(shared) = shared {
                shared.server_errors.fetch_add(1, Ordering::SeqCst);
            }
        }
        if !status.is_success() {
            bail!("GET {path} answered {status}");
        }
        Ok(res.json().await?)
    }

    /// Waits until every computer is online with its recipe.
    async fn wait_ready(&self, agents: &[Agent]) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let devices = self.get(None, "/api/devices").await?;
            let ready = agents.iter().all(|agent| {
                devices.as_array().is_some_and(|devices| {
                    devices.iter().any(|device| {
                        device["id"] == agent.device_id.as_str()
                            && device["online"] == true
                            && device["capabilities"]["engines"]
                                .as_array()
                                .is_some_and(|engines| !engines.is_empty())
                    })
                })
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the computers did not come online; see their agent.log");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates a job, retrying while the server is down. A create whose answer was lost
    /// may have committed: every send carries one `Idempotency-Key`, and the job is also
    /// looked for by its title before sending again (a server that keeps no keys), so a
    /// retry never makes a second job.
    async fn create_job(
        &self,
        shared: &Shared,
        device_id: &str,
        title: &str,
        secs: u64,
        deadline: Instant,
    ) -> anyhow::Result<String> {
        let body = json!({
            "deviceId": device_id, "title": title, "prompt": secs.to_string(),
            "folder": "work", "engine": "counted", "mode": "unattended", "network": false,
            "timeoutMinutes": 10,
        });
        // Not from the seed: the same seed on a reused database must not find an old key.
        let key = format!("soak-{:016x}", rand::random::<u64>());
        let mut sent = false;
        loop {
            if sent {
                match self.find_by_title(shared, title).await {
                    Ok(Some(id)) => return Ok(id),
                    Ok(None) => {}
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
            if Instant::now() > deadline + Duration::from_secs(60) {
                bail!("the server never took it");
            }
            sent = true;
            let answer = self
                .http
                .post(format!("{}/api/jobs", self.base))
                .bearer_auth(&self.token)
                .header("idempotency-key", &key)
                .json(&body)
                .send()
                .await;
            match answer {
                Ok(res) if res.status().is_success() => {
                    let job: Value = res.json().await?;
                    return job["id"]
                        .as_str()
                        .map(str::to_owned)
                        .context("no id in the answer");
                }
                Ok(res) if res.status().is_server_error() => {
                    shared.server_errors.fetch_add(1, Ordering::SeqCst);
                    shared.clock.say(&format!(
                        "POST /api/jobs answered {}: {}",
                        res.status(),
                        res.text().await.unwrap_or_default()
                    ));
                }
                // The key's first send still being answered (or cut off with the server).
                Ok(res) if res.status() == reqwest::StatusCode::CONFLICT => {
                    shared.clock.say(&format!(
                        "POST /api/jobs ({title}) answered 409: {}",
                        res.text().await.unwrap_or_default()
                    ));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(res) => {
                    let status = res.status();
                    bail!("POST /api/jobs answered {status}: {}", res.text().await?);
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn find_by_title(&self, shared: &Shared, title: &str) -> anyhow::Result<Option<String>> {
        let jobs = self.get(Some(shared), "/api/jobs").await?;
        Ok(jobs.as_array().and_then(|jobs| {
            jobs.iter()
                .find(|job| job["title"] == title)
                .and_then(|job| job["id"].as_str())
                .map(str::to_owned)
        }))
    }

    /// What `computer` is doing, as the server sees it, for the fault's line: a run under
    /// way is what a fault is meant to meet.
    async fn doing(&self, shared: &Shared, computer: usize) -> String {
        let running = self.running(shared, computer).await;
        if running.is_empty() {
            "idle".to_owned()
        } else {
            format!("running {}", running.join(", "))
        }
    }

    /// The titles of `computer`'s runs under way (none while the server does not answer).
    async fn running(&self, shared: &Shared, computer: usize) -> Vec<String> {
        let device_id = shared.agents[computer].lock().await.device_id.clone();
        let path = format!("/api/jobs?deviceId={device_id}");
        let Ok(Ok(jobs)) =
            tokio::time::timeout(Duration::from_secs(2), self.get(Some(shared), &path)).await
        else {
            return Vec::new();
        };
        jobs.as_array()
            .into_iter()
            .flatten()
            .filter(|job| matches!(job["state"].as_str(), Some("running" | "waiting")))
            .filter_map(|job| job["title"].as_str().map(str::to_owned))
            .collect()
    }

    /// Whether every assigned job is in a final state (false while the server is down).
    async fn all_ended(&self, assigned: &[Assigned], shared: &Shared) -> bool {
        let Ok(jobs) = self.get(Some(shared), "/api/jobs").await else {
            return false;
        };
        let states: HashMap<&str, &str> = jobs
            .as_array()
            .map(|jobs| {
                jobs.iter()
                    .filter_map(|job| Some((job["id"].as_str()?, job["state"].as_str()?)))
                    .collect()
            })
            .unwrap_or_default();
        assigned.iter().all(|job| {
            states
                .get(job.id.as_str())
                .is_some_and(|state| is_final(state))
        })
    }
}

fn is_final(state: &str) -> bool {
    matches!(
        state,
        "succeeded" | "failed" | "blocked" | "cancelled" | "interrupted"
    )
}

/// What the audit found.
#[derive(Debug, Default)]
struct Audit {
    jobs: usize,
    by_state: BTreeMap<String, usize>,
    attempts: u64,
    starts: usize,
    ends: usize,
    reattaches: usize,
    resumes: usize,
    overlapped: Vec<String>,
    lost: Vec<String>,
    moved: Vec<String>,
    repeated: Vec<String>,
    /// Succeeded, yet its side effect never reached its end.
    unfinished_successes: Vec<String>,
    /// Ran to its end on the computer (exit 0), yet reported otherwise after the settling:
    /// an outcome the computer kept and never delivered.
    finished_not_succeeded: Vec<String>,
}

/// Reads every job back through the API and every folder's `runs.txt`.
async fn audit(web: &Web, shared: &Shared, assigned: &[Assigned]) -> Audit {
    // (folder, kind, job, attempt) in the order they were written.
    let mut lines: HashMap<String, Vec<(usize, String, String)>> = HashMap::new();
    for (computer, agent) in shared.agents.iter().enumerate() {
        let folder = agent.lock().await.folder.clone();
        let text = std::fs::read_to_string(folder.join("runs.txt")).unwrap_or_default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some(kind), Some(job), Some(attempt)) =
                (words.next(), words.next(), words.next())
            {
                lines.entry(job.to_owned()).or_default().push((
                    computer,
                    kind.to_owned(),
                    attempt.to_owned(),
                ));
            }
        }
    }
    let mut audit = Audit {
        jobs: assigned.len(),
        ..Audit::default()
    };
    for job in assigned {
        let mut read = None;
        for _ in 0..20 {
            match web
                .get(Some(shared), &format!("/api/jobs/{}", job.id))
                .await
            {
                Ok(value) => {
                    read = Some(value);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        let Some(read) = read else {
            audit.lost.push(format!("{}: not readable", job.id));
            continue;
        };
        let state = read["state"].as_str().unwrap_or("?").to_owned();
        *audit.by_state.entry(state.clone()).or_default() += 1;
        audit.attempts += read["attempt"].as_u64().unwrap_or(0);
        for event in read["events"].as_array().into_iter().flatten() {
            let text = event["text"].as_str().unwrap_or_default();
            if text.starts_with("Reattached by the device") {
                audit.reattaches += 1;
            } else if text.starts_with("Resumed by the device") {
                audit.resumes += 1;
            }
        }
        if !is_final(&state) {
            audit.lost.push(format!("{}: still {state}", job.id));
        }
        let expected_device = shared.agents[job.computer].lock().await.device_id.clone();
        if read["deviceId"] != expected_device.as_str() {
            audit
                .moved
                .push(format!("{}: now on {}", job.id, read["deviceId"]));
        }
        let written = lines.remove(&job.id).unwrap_or_default();
        if written
            .iter()
            .any(|(computer, ..)| *computer != job.computer)
        {
            audit
                .moved
                .push(format!("{}: ran on another computer", job.id));
        }
        let mut started = Vec::new();
        let mut ends = 0;
        for (_, kind, attempt) in &written {
            match kind.as_str() {
                "overlap" => audit
                    .overlapped
                    .push(format!("{} (carry-on {attempt})", job.id)),
                "start" => {
                    audit.starts += 1;
                    if started.contains(attempt) {
                        audit
                            .repeated
                            .push(format!("{}: carry-on {attempt} started twice", job.id));
                    }
                    if ends > 0 {
                        audit
                            .repeated
                            .push(format!("{}: started again after it finished", job.id));
                    }
                    started.push(attempt.clone());
                }
                "end" => {
                    audit.ends += 1;
                    ends += 1;
                }
                _ => {}
            }
        }
        if ends > 1 {
            audit
                .repeated
                .push(format!("{}: finished {ends} times", job.id));
        }
        if state == "succeeded" && ends == 0 {
            audit.unfinished_successes.push(job.id.clone());
        }
        if ends > 0 && state != "succeeded" {
            audit
                .finished_not_succeeded
                .push(format!("{}: {state}", job.id));
        }
    }
    // Lines for a job nobody assigned: a run from nowhere.
    for job in lines.keys() {
        audit
            .moved
            .push(format!("{job}: not one of the soak's jobs"));
    }
    audit
}

impl Audit {
    /// Prints the figures and the verdict; true when the promise held.
    fn print(
        &self,
        backend: &str,
        faults: &BTreeMap<&'static str, usize>,
        client_5xx: usize,
        server_5xx: usize,
        wall: Duration,
        faults_ended: Duration,
    ) -> bool {
        let mut out = String::new();
        let total: usize = faults.values().sum();
        let listed: Vec<String> = faults
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        let _ = writeln!(out, "\n{backend} figures");
        let _ = writeln!(out, "- faults: {total} ({})", listed.join(", "));
        let states: Vec<String> = self
            .by_state
            .iter()
            .map(|(state, n)| format!("{n} {state}"))
            .collect();
        let _ = writeln!(out, "- jobs: {} ({})", self.jobs, states.join(", "));
        let _ = writeln!(
            out,
            "- attempts: {} (resumes {}, reattaches {}); side effects: {} starts, {} ends",
            self.attempts, self.resumes, self.reattaches, self.starts, self.ends
        );
        let _ = writeln!(
            out,
            "- wall time: {:.0} s ({:.0} s of assignment and faults, {:.0} s settling)",
            wall.as_secs_f64(),
            faults_ended.as_secs_f64(),
            (wall.saturating_sub(faults_ended)).as_secs_f64()
        );
        let _ = writeln!(
            out,
            "- overlapped {}, lost {}, moved {}, 5xx {} (to the soak {client_5xx}, in the \
             server's log {server_5xx}), side effect repeated {}, succeeded without finishing {}, \
             ran to its end but reported otherwise {}",
            self.overlapped.len(),
            self.lost.len(),
            self.moved.len(),
            client_5xx + server_5xx,
            self.repeated.len(),
            self.unfinished_successes.len(),
            self.finished_not_succeeded.len()
        );
        for (what, list) in [
            ("overlapped", &self.overlapped),
            ("lost", &self.lost),
            ("moved", &self.moved),
            ("repeated", &self.repeated),
            ("succeeded without finishing", &self.unfinished_successes),
            (
                "ran to its end, reported otherwise",
                &self.finished_not_succeeded,
            ),
        ] {
            for item in list {
                let _ = writeln!(out, "  {what}: {item}");
            }
        }
        let held = self.overlapped.is_empty()
            && self.lost.is_empty()
            && self.moved.is_empty()
            && self.repeated.is_empty()
            && self.unfinished_successes.is_empty()
            && self.finished_not_succeeded.is_empty()
            && client_5xx + server_5xx == 0;
        let _ = writeln!(
            out,
            "verdict ({backend}): {}",
            if held { "held" } else { "FAILED" }
        );
        print!("{out}");
        held
    }
}

/// A TCP proxy in front of the server for one computer: it can reset every open connection
/// (new ones go through), or hold them all open and silent, as a partition nobody is told of.
struct Proxy {
    base: String,
    state: Arc<ProxyState>,
    accept: AbortHandle,
}

struct ProxyState {
    upstream: String,
    connections: std::sync::Mutex<Vec<AbortHandle>>,
    /// While true nothing goes either way and nothing is closed: open connections fall
    /// silent, new ones are accepted and never answered. When it ends they are closed.
    held: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: &str) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(ProxyState {
            upstream: upstream.trim_start_matches("http://").to_owned(),
            connections: std::sync::Mutex::new(Vec::new()),
            held: watch::Sender::new(false),
        });
        let accepting = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                if let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(forward(accepting.clone(), socket));
                }
            }
        })
        .abort_handle();
        Ok(Proxy {
            base,
            state,
            accept,
        })
    }

    /// Closes every open connection; returns how many there were.
    fn reset(&self) -> usize {
        let mut connections = self
            .state
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        connections.retain(|handle| !handle.is_finished());
        let open = connections.len();
        for handle in connections.drain(..) {
            handle.abort();
        }
        open
    }

    fn hold(&self, held: bool) {
        self.state.held.send_replace(held);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset();
    }
}

async fn forward(state: Arc<ProxyState>, mut client: TcpStream) {
    let mut held = state.held.subscribe();
    if *held.borrow() {
        // Accepted and never answered, until the hold ends or the client gives up.
        let mut sink = [0u8; 4096];
        tokio::select! {
            _ = async { while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {} } => {}
            _ = held.wait_for(|held| !*held) => {}
        }
        return;
    }
    let Ok(mut server) = TcpStream::connect(&state.upstream).await else {
        return;
    };
    let task = tokio::spawn(async move {
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            _ = held.wait_for(|held| *held) => {}
        }
        // Held: the server's side goes, the computer's stays open and silent until released.
        drop(server);
        let _ = held.wait_for(|held| !*held).await;
        let _ = client.shutdown().await;
    });
    let mut connections = state
        .connections
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    connections.retain(|handle| !handle.is_finished());
    connections.push(task.abort_handle());
}
