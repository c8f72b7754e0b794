//! The launcher: the agent binary re-executed as `tether-agent sandbox-exec --spec-file F`.
//!
//! It needs no `unsafe` (no `pre_exec`): it restricts *itself* — Landlock, capabilities
//! dropped, seccomp, as its [`LaunchSpec`] says — then starts the program, which inherits
//! every restriction. It stays as the program's parent and the subreaper of everything the
//! program starts (so a `setsid` or a double fork cannot leave the tree), and:
//!
//! - when the program exits, gives what it left running 1 s, then kills it, and exits with the
//!   program's status;
//! - on SIGTERM, and when the agent dies, sends SIGTERM to the whole tree, then SIGKILL after
//!   2 s;
//! - on SIGHUP or SIGINT, kills the whole tree at once.
//!
//! Inside bubblewrap with the network off, it also serves the spec's forwards: before it
//! restricts itself it listens on each loopback port of the sandbox's own network, and for
//! as long as it supervises it bridges every connection to the forward's Unix socket (the
//! agent's relay or proxy for an engine limited to its model endpoints).
//!
//! The agent's death is seen without any channel of its own: where the launcher is the
//! agent's child, its spec names the agent's pid, and a parent that is not (or no longer)
//! that process means the agent is gone (a dead parent's children are re-parented at once).
//! Inside bubblewrap the PID namespace and `--die-with-parent` end everything with the agent.
//! So the launcher's stdin is free: the spec says whether the program reads it (an ACP
//! agent's input, a pipe the agent writes to) or nothing.

use std::path::Path;

use crate::sandbox::launch::{LaunchSpec, SANDBOX_FAILED, SANDBOX_FAILED_PREFIX};

/// Runs the launcher and exits with the program's status.
pub fn run_main(spec_file: &Path) -> ! {
    let code = match imp::run(spec_file) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{SANDBOX_FAILED_PREFIX}{err}");
            SANDBOX_FAILED
        }
    };
    std::process::exit(code)
}

fn read_spec(spec_file: &Path) -> Result<LaunchSpec, String> {
    let bytes = std::fs::read(spec_file)
        .map_err(|err| format!("cannot read the launch spec {}: {err}", spec_file.display()))?;
    // The spec holds the environment: gone as soon as it is read.
    let _ = std::fs::remove_file(spec_file);
    serde_json::from_slice(&bytes).map_err(|err| format!("bad launch spec: {err}"))
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::{HashMap, HashSet};
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use rustix::process::{Pid, Signal, WaitOptions};
    use tokio::signal::unix::{signal, SignalKind};

    use super::read_spec;
    use crate::sandbox::launch::{Forward, Input, LaunchSpec, Layer, ProbeResult};

    /// How long what the program left behind may live after it exited.
    const LEFTOVER_GRACE: Duration = Duration::from_millis(1000);
    /// How long the tree gets between SIGTERM and SIGKILL.
    const TERMINATE_GRACE: Duration = Duration::from_secs(2);
    const TICK: Duration = Duration::from_millis(20);

    pub fn run(spec_file: &Path) -> Result<i32, String> {
        let spec = read_spec(spec_file)?;
        // Become the reaper of every orphan below us before anything can fork.
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|err| format!("cannot become a subreaper: {err}"))?;
        let parent = rustix::process::getppid();
        if let Some(agent) = spec.agent_pid {
            let agent = i32::try_from(agent).ok().and_then(Pid::from_raw);
            if parent != agent {
                return Err("the agent that started this run is gone".to_owned());
            }
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("cannot start: {err}"))?;
        runtime.block_on(supervise(spec, parent))
    }

    fn restrict(spec: &LaunchSpec) -> Result<ProbeResult, String> {
        let mut result = ProbeResult::default();
        match spec.layer {
            Layer::Landlock => {
                let applied = crate::sandbox::landlock::apply(
                    &spec.read,
                    &spec.write,
                    &spec.devices,
                    !spec.network,
                )?;
                result.landlock_abi = applied.kernel_abi;
                result.landlock = Some(applied.status.to_owned());
                result.no_new_privs = applied.no_new_privs;
                if applied.status == "none" && !spec.probe {
                    return Err(
                        "Landlock is not enforced by this kernel; refusing to run unconfined"
                            .to_owned(),
                    );
                }
                drop_capabilities(&mut result);
                crate::sandbox::seccomp::apply(!spec.network)?;
                result.seccomp = true;
            }
            Layer::Seccomp => {
                rustix::thread::set_no_new_privs(true)
                    .map_err(|err| format!("no_new_privs: {err}"))?;
                result.no_new_privs = true;
                // Bubblewrap isolates the network; seccomp adds the rest.
                crate::sandbox::seccomp::apply(false)?;
                result.seccomp = true;
                result.capabilities_left = has_capabilities();
            }
            Layer::Unconfined => {}
        }
        Ok(result)
    }

    /// Drops every capability (the bounding set too, so running a program as root gives none
    /// back). Only matters when the agent runs as root.
    fn drop_capabilities(result: &mut ProbeResult) {
        use rustix::thread::{CapabilitySet, CapabilitySets};
        if !has_capabilities() {
            return;
        }
        for bit in 0..64u32 {
            let _ = rustix::thread::remove_capability_from_bounding_set(
                CapabilitySet::from_bits_retain(1 << bit),
            );
        }
        let _ = rustix::thread::clear_ambient_capability_set();
        let empty = CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        };
        if let Err(err) = rustix::thread::set_capabilities(None, empty) {
            result
                .notes
                .push(format!("could not drop capabilities: {err}"));
        }
        result.capabilities_left = has_capabilities();
    }

    fn has_capabilities() -> bool {
        rustix::thread::capabilities(None)
            .map(|sets| !sets.effective.is_empty() || !sets.permitted.is_empty())
            .unwrap_or(true)
    }

    /// Supervises the program until its whole tree is gone; `parent` is the launcher's parent
    /// at start (the agent, or bubblewrap's init).
    async fn supervise(spec: LaunchSpec, parent: Option<Pid>) -> Result<i32, String> {
        // Signal handlers and the runtime's own descriptors exist before seccomp applies.
        let mut term = signal(SignalKind::terminate()).map_err(|err| err.to_string())?;
        let mut hangup = signal(SignalKind::hangup()).map_err(|err| err.to_string())?;
        let mut interrupt = signal(SignalKind::interrupt()).map_err(|err| err.to_string())?;
        // Listening needs nothing seccomp takes away, but before it nothing else can bind.
        serve_forwards(&spec).await?;
        let result = restrict(&spec)?;
        if spec.probe {
            println!(
                "{}",
                serde_json::to_string(&result).map_err(|err| err.to_string())?
            );
            return Ok(0);
        }
        let Some((program, args)) = spec.argv.split_first() else {
            return Err("nothing to run".to_owned());
        };
        let child = Command::new(program)
            .args(args)
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env.iter().map(|(name, value)| (name, value)))
            .stdin(input(spec.stdin))
            // Its own group: signals for the launcher never reach the program directly.
            .process_group(0)
            .spawn()
            .map_err(|err| format!("could not start {program:?}: {err}"))?;
        let main = Pid::from_raw(child.id() as i32).ok_or("the program has no pid")?;
        // Not waited for through `Child`: the loop below reaps every process, this one too.
        drop(child);

        let mut main_status: Option<rustix::process::WaitStatus> = None;
        let mut leftovers_deadline: Option<Instant> = None;
        let mut kill_at: Option<Instant> = None;
        let mut terminating = false;
        loop {
            reap(main, &mut main_status);
            let tree = descendants();
            if main_status.is_some() && tree.is_empty() {
                break;
            }
            let now = Instant::now();
            if !terminating && rustix::process::getppid() != parent {
                // The agent died: nobody supervises this run any more.
                terminating = true;
                kill_all(Signal::TERM);
                kill_at.get_or_insert(now + TERMINATE_GRACE);
            }
            if main_status.is_some() && leftovers_deadline.is_none() {
                leftovers_deadline = Some(now + LEFTOVER_GRACE);
            }
            if leftovers_deadline.is_some_and(|at| now >= at) || kill_at.is_some_and(|at| now >= at)
            {
                kill_all(Signal::KILL);
            }
            tokio::select! {
                _ = term.recv() => {
                    if !terminating {
                        terminating = true;
                        kill_all(Signal::TERM);
                        kill_at = Some(Instant::now() + TERMINATE_GRACE);
                    }
                }
                _ = hangup.recv() => kill_at = Some(Instant::now()),
                _ = interrupt.recv() => kill_at = Some(Instant::now()),
                () = tokio::time::sleep(TICK) => {}
            }
        }
        Ok(exit_code(main_status))
    }

    /// Listens on every forward's loopback port (inside bubblewrap's own network, where
    /// nothing else is) and bridges each connection to its Unix socket, on this runtime, for
    /// as long as the launcher supervises.
    async fn serve_forwards(spec: &LaunchSpec) -> Result<(), String> {
        if spec.forwards.is_empty() {
            return Ok(());
        }
        if spec.layer != Layer::Seccomp || spec.network {
            return Err(
                "forwarded ports need bubblewrap's own network with the network off".to_owned(),
            );
        }
        for forward in &spec.forwards {
            let v4 = tokio::net::TcpListener::bind(("127.0.0.1", forward.port))
                .await
                .map_err(|err| format!("cannot listen on 127.0.0.1:{}: {err}", forward.port))?;
            tokio::spawn(bridge_all(v4, forward.clone()));
            // IPv6 may be off inside; 127.0.0.1 is what the engine is told.
            if let Ok(v6) = tokio::net::TcpListener::bind(("::1", forward.port)).await {
                tokio::spawn(bridge_all(v6, forward.clone()));
            }
        }
        Ok(())
    }

    async fn bridge_all(listener: tokio::net::TcpListener, forward: Forward) {
        loop {
            match listener.accept().await {
                Ok((tcp, _)) => {
                    tokio::spawn(bridge(tcp, forward.socket.clone()));
                }
                // Out of descriptors, most likely: wait, keep listening.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn bridge(mut tcp: tokio::net::TcpStream, socket: std::path::PathBuf) {
        // A relay that is gone closes the connection: the program sees a reset.
        let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await else {
            return;
        };
        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
    }

    /// The program's stdin: the launcher's own (a pipe the agent writes to), or nothing.
    fn input(stdin: Input) -> Stdio {
        match stdin {
            Input::Pipe => Stdio::inherit(),
            Input::Null => Stdio::null(),
        }
    }

    /// Reaps every child that ended (the program and adopted orphans).
    fn reap(main: Pid, main_status: &mut Option<rustix::process::WaitStatus>) {
        while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
            if pid == main {
                *main_status = Some(status);
            }
        }
    }

    /// Sends `signal` to every descendant, repeatedly until a pass finds no new process (a
    /// fork racing the kill is caught by the next pass).
    fn kill_all(signal: Signal) {
        let mut signalled = HashSet::new();
        for _ in 0..50 {
            let tree = descendants();
            let fresh: Vec<i32> = tree
                .into_iter()
                .filter(|pid| !signalled.contains(pid))
                .collect();
            if fresh.is_empty() {
                return;
            }
            for pid in fresh {
                if let Some(target) = Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(target, signal);
                }
                signalled.insert(pid);
            }
            if signal != Signal::KILL {
                return;
            }
        }
    }

    /// Every live process below this one, from `/proc`. Orphans are re-parented to us (the
    /// subreaper), so nothing the program started can leave this tree.
    fn descendants() -> Vec<i32> {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("");
            let Some(ppid) = fields.next().and_then(|ppid| ppid.parse::<i32>().ok()) else {
                continue;
            };
            if state == "Z" || state == "X" {
                continue;
            }
            children.entry(ppid).or_default().push(pid);
        }
        let mut found = Vec::new();
        let mut queue = vec![me];
        while let Some(parent) = queue.pop() {
            if let Some(kids) = children.get(&parent) {
                for kid in kids {
                    found.push(*kid);
                    queue.push(*kid);
                }
            }
        }
        found
    }

    fn exit_code(status: Option<rustix::process::WaitStatus>) -> i32 {
        let Some(status) = status else {
            return 128 + 9;
        };
        if let Some(code) = status.exit_status() {
            return code;
        }
        if let Some(signo) = status.terminating_signal() {
            // End the same way, so the agent reports "killed by signal N".
            if let Some(signal) = Signal::from_named_raw(signo) {
                let _ = rustix::process::kill_process(rustix::process::getpid(), signal);
                std::thread::sleep(Duration::from_millis(100));
            }
            return 128 + signo;
        }
        1
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;
    use std::process::{Command, Stdio};

    use super::read_spec;
    use crate::sandbox::launch::{Input, Layer};

    /// Elsewhere (macOS: inside `sandbox-exec`), the launcher only starts the program.
    pub fn run(spec_file: &Path) -> Result<i32, String> {
        let spec = read_spec(spec_file)?;
        if spec.layer != Layer::Unconfined {
            return Err("this layer needs Linux".to_owned());
        }
        if !spec.forwards.is_empty() {
            return Err("forwarded ports need bubblewrap".to_owned());
        }
        if spec.probe {
            println!("{{}}");
            return Ok(0);
        }
        let Some((program, args)) = spec.argv.split_first() else {
            return Err("nothing to run".to_owned());
        };
        let status = Command::new(program)
            .args(args)
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env.iter().map(|(name, value)| (name, value)))
            .stdin(match spec.stdin {
                Input::Pipe => Stdio::inherit(),
                Input::Null => Stdio::null(),
            })
            .status()
            .map_err(|err| format!("could not start {program:?}: {err}"))?;
        Ok(status.code().unwrap_or(1))
    }
}
