//! The browser a screenshot is taken with: found on this computer, started for one capture
//! through the run's own confinement, ended (its whole process group) afterwards.
//!
//! - Search order: `TETHER_CHROMIUM` (a path) first; then on `PATH` `chromium`,
//!   `chromium-browser`, `google-chrome-stable`, `google-chrome`, `chrome`; then the macOS
//!   apps in `/Applications` (Chromium, Google Chrome).
//! - It starts as the run's commands do ([`Sandbox::prepare`]): home hidden, the run's folder
//!   readable, only a private temporary folder writable (its fresh profile, removed after),
//!   the run's scrubbed environment. Never the person's own profile, no extensions, no sync,
//!   no first-run, headless.
//! - Network: the sandbox's network is on, because that is the only mode in which the host's
//!   loopback (where the run's dev server listens) is reachable: bubblewrap's network off is
//!   a namespace of its own with its own empty loopback, and Landlock's off refuses every
//!   socket. The browser itself is then held to loopback: every request goes to a proxy that
//!   refuses connections, which Chromium bypasses only for loopback, and every name but
//!   `localhost` resolves to nothing, so a page's subresources on the internet fail.
//! - DevTools speaks over `--remote-debugging-pipe` (fds 3 and 4), never a TCP port. The
//!   fds are two FIFOs in the private folder, opened by a shell in front of the browser
//!   inside the sandbox, so nothing has to be passed through bubblewrap and the launcher.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::Child;

use crate::policy::guard::Guard;
use crate::run::process_group;
use crate::sandbox::{self, Backend, Policy, Sandbox, Start};

/// The variable naming the browser to use, before any search.
pub const BROWSER_VAR: &str = "TETHER_CHROMIUM";
/// Program names looked for on `PATH`, in order.
pub const PATH_NAMES: &[&str] = &[
    "chromium",
    "chromium-browser",
    "google-chrome-stable",
    "google-chrome",
    "chrome",
];
/// The macOS apps looked for last, in order.
pub const MACOS_APPS: &[&str] = &[
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
];
/// Said when nothing was found.
pub const NOT_FOUND: &str =
    "no Chromium or Chrome was found on this computer; install one or set TETHER_CHROMIUM";
/// How long the browser has to open its DevTools pipe.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How much of the browser's own output is kept, to explain a failure.
const STDERR_KEPT: usize = 16 * 1024;
/// How much of it a failure shows.
const SHOWN: usize = 1500;

/// The browser to start: `named` (`TETHER_CHROMIUM`) when set, else the first of
/// [`PATH_NAMES`] in a folder of `path`, else the first of [`MACOS_APPS`]; `is_program`
/// says whether a path is an executable file.
///
/// # Errors
/// [`NOT_FOUND`], or why `TETHER_CHROMIUM` names nothing usable.
pub fn find(
    named: Option<OsString>,
    path: Option<OsString>,
    is_program: impl Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    if let Some(named) = named.filter(|named| !named.is_empty()) {
        let named = PathBuf::from(named);
        return if is_program(&named) {
            Ok(named)
        } else {
            Err(format!(
                "{BROWSER_VAR}={} is not a program this computer can run",
                named.display()
            ))
        };
    }
    let folders: Vec<PathBuf> = path
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    let on_path = PATH_NAMES.iter().flat_map(|name| {
        folders
            .iter()
            .filter(|folder| folder.is_absolute())
            .map(move |folder| folder.join(name))
    });
    on_path
        .chain(MACOS_APPS.iter().map(PathBuf::from))
        .find(|candidate| is_program(candidate))
        .ok_or_else(|| NOT_FOUND.to_owned())
}

/// Whether `path` is an executable regular file (after links).
pub fn is_program(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Chromium's switches for one confined, offline-but-loopback, throwaway capture.
pub fn switches(profile: &Path, inside_os_sandbox: bool) -> Vec<String> {
    let mut switches: Vec<String> = [
        "--headless=new",
        "--remote-debugging-pipe",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-component-extensions-with-background-pages",
        "--disable-sync",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-breakpad",
        "--disable-crash-reporter",
        "--no-pings",
        "--disable-quic",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--mute-audio",
        "--password-store=basic",
        "--use-mock-keychain",
        // Everything but loopback goes to a proxy that refuses connections (Chromium
        // bypasses the proxy for loopback by itself), and every name but localhost resolves
        // to nothing: a page's subresources on the internet fail.
        "--proxy-server=http://127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE *.localhost, EXCLUDE 127.*, EXCLUDE ::1, EXCLUDE [::1]",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    ]
    .iter()
    .map(|switch| (*switch).to_owned())
    .collect();
    switches.push(format!("--user-data-dir={}", profile.display()));
    if inside_os_sandbox {
        // Chromium's own sandbox needs user namespaces (or a setuid helper, or Seatbelt on
        // macOS), which the OS sandbox the run is confined in does not let it nest; the OS
        // sandbox is what confines the browser then.
        switches.push("--no-sandbox".to_owned());
    }
    switches.push("about:blank".to_owned());
    switches
}

/// What a capture's browser runs with: the run's sandbox, guard and scrubbed environment,
/// and its folder (readable, where a `file://` target lives).
pub struct Confinement<'a> {
    pub sandbox: &'a Sandbox,
    pub guard: &'a Guard,
    pub env: &'a [(String, String)],
    pub run_folder: &'a Path,
}

/// A started browser: its DevTools pipe, and what ends it.
pub struct Browser {
    /// Messages to the browser (its fd 3).
    pub to: pipe::Sender,
    /// Messages from the browser (its fd 4).
    pub from: pipe::Receiver,
    started: Started,
    /// The private folder of the profile and the FIFOs, removed when dropped.
    _private: tempfile::TempDir,
}

impl Browser {
    /// Starts `program` confined as `confinement` says, and opens its DevTools pipe.
    ///
    /// # Errors
    /// A sentence: the sandbox refused, the browser did not start or did not open its pipe.
    pub async fn start(program: &Path, confinement: &Confinement<'_>) -> Result<Browser, String> {
        let private = tempfile::Builder::new()
            .prefix("tether-capture-")
            .tempdir()
            .map_err(|err| format!("cannot create the capture's temporary folder: {err}"))?;
        let root = private
            .path()
            .canonicalize()
            .map_err(|err| format!("cannot read the capture's temporary folder: {err}"))?;
        let (to_path, from_path) = (root.join("devtools-in"), root.join("devtools-out"));
        make_fifo(&to_path).await?;
        make_fifo(&from_path).await?;
        let profile = root.join("profile");
        std::fs::create_dir(&profile)
            .map_err(|err| format!("cannot create the browser's profile folder: {err}"))?;
        let inside_os_sandbox = !matches!(confinement.sandbox.backend(), Backend::None { .. });
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            // The browser's fd 4 first: our reader is already there, so this open does not
            // wait, and our writer's open of fd 3 then finds the shell waiting to read.
            r#"out=$1; in=$2; shift 2; exec "$@" 4>"$out" 3<"$in""#.to_owned(),
            "tether-capture".to_owned(),
            from_path.display().to_string(),
            to_path.display().to_string(),
            program.display().to_string(),
        ];
        argv.extend(switches(&profile, inside_os_sandbox));
        let policy = Policy {
            work_folder: root.clone(),
            writable: Vec::new(),
            readable: vec![confinement.run_folder.to_path_buf()],
            denied: Vec::new(),
            network: true,
            env: private_env(confinement.env, &root),
        };
        let mut prepared = confinement
            .sandbox
            .prepare(confinement.guard, &policy, &Start::new(&argv))
            .map_err(|refused| format!("the browser cannot start confined: {}", refused.0))?;
        prepared.command.stdin(Stdio::null()).stdout(Stdio::null());
        let mut child = prepared
            .command
            .spawn()
            .map_err(|err| format!("the browser could not start: {err}"))?;
        let pgid = child.id();
        let stderr = child.stderr.take();
        let stderr = tokio::spawn(keep_tail(stderr));
        let mut started = Started {
            child,
            pgid,
            stderr,
            prepared,
        };
        let pipes = match open_pipes(&mut started.child, &to_path, &from_path).await {
            Ok(pipes) => pipes,
            Err(why) => return Err(started.fail(&why).await),
        };
        Ok(Browser {
            to: pipes.0,
            from: pipes.1,
            started,
            _private: private,
        })
    }

    /// Ends the browser's whole process tree and says why the capture failed, with the end of
    /// what the browser wrote.
    pub async fn fail(self, why: &str) -> String {
        self.started.fail(why).await
    }

    /// Ends the browser's whole process tree; its private folder goes with it.
    pub async fn end(self) {
        self.started.end().await;
    }
}

/// The confined process of a browser.
struct Started {
    child: Child,
    pgid: Option<u32>,
    stderr: tokio::task::JoinHandle<String>,
    prepared: sandbox::Prepared,
}

impl Started {
    /// The leader is the launcher (or bubblewrap): a hang-up makes it kill the whole tree at
    /// once, and then whatever is left of the group is killed.
    async fn end(mut self) -> String {
        match self.pgid {
            Some(pgid) => {
                process_group::terminate(&mut self.child, pgid, Duration::ZERO).await;
            }
            None => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
            }
        }
        drop(self.prepared.finish());
        tokio::time::timeout(Duration::from_secs(2), self.stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    }

    async fn fail(self, why: &str) -> String {
        let said = self.end().await;
        // Chromium complains of the missing session bus at every start: not the reason.
        let said: Vec<&str> = said
            .lines()
            .filter(|line| !line.contains("dbus") && !line.trim().is_empty())
            .collect();
        let said = said.join("\n");
        let said = tail(said.trim(), SHOWN);
        if said.is_empty() {
            why.to_owned()
        } else {
            format!("{why}; the browser said: {said}")
        }
    }
}

/// Opens our ends of the DevTools FIFOs: the reader at once (so the shell's open of the
/// browser's fd 4 does not wait), then the writer as soon as the shell waits to read fd 3.
async fn open_pipes(
    child: &mut Child,
    to_path: &Path,
    from_path: &Path,
) -> Result<(pipe::Sender, pipe::Receiver), String> {
    let from = pipe::OpenOptions::new()
        .open_receiver(from_path)
        .map_err(|err| format!("cannot open the browser's DevTools pipe: {err}"))?;
    let started = Instant::now();
    loop {
        match pipe::OpenOptions::new().open_sender(to_path) {
            Ok(to) => return Ok((to, from)),
            // ENXIO: nobody reads the FIFO yet.
            Err(err) if err.raw_os_error() == Some(libc::ENXIO) => {}
            Err(err) => return Err(format!("cannot open the browser's DevTools pipe: {err}")),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the browser ended before it started ({status})"));
        }
        if started.elapsed() > START_LIMIT {
            return Err(format!(
                "the browser did not start within {} seconds",
                START_LIMIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A FIFO at `path`, only this user's (`mkfifo`, the POSIX program, so no `unsafe`).
async fn make_fifo(path: &Path) -> Result<(), String> {
    let status = tokio::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map_err(|err| format!("cannot make the DevTools pipe (mkfifo): {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cannot make the DevTools pipe (mkfifo {status})"))
    }
}

/// The run's environment, with the browser's home, caches and settings in its private folder.
fn private_env(env: &[(String, String)], root: &Path) -> Vec<(String, String)> {
    let private = ["HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"];
    let mut env: Vec<(String, String)> = env
        .iter()
        .filter(|(name, _)| !private.contains(&name.as_str()))
        .cloned()
        .collect();
    for name in private {
        env.push((name.to_owned(), root.display().to_string()));
    }
    env
}

/// The last `most` bytes of `text` (or a little less, to end on a character).
fn tail(text: &str, most: usize) -> &str {
    let mut start = text.len().saturating_sub(most);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The last [`STDERR_KEPT`] bytes the browser wrote on stderr.
async fn keep_tail(stderr: Option<tokio::process::ChildStderr>) -> String {
    let Some(mut stderr) = stderr else {
        return String::new();
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut chunk = [0_u8; 4096];
    while let Ok(read) = stderr.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..read]);
        if kept.len() > STDERR_KEPT {
            kept.drain(..kept.len() - STDERR_KEPT);
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(named: Option<&str>, path: &str, programs: &[&str]) -> Result<PathBuf, String> {
        find(named.map(OsString::from), Some(OsString::from(path)), |p| {
            programs.iter().any(|program| Path::new(program) == p)
        })
    }

    #[test]
    fn the_browser_is_searched_in_the_documented_order() {
        let everything = [
            "/opt/mine/chrome-for-testing",
            "/a/google-chrome",
            "/b/chromium",
            "/b/chromium-browser",
            "/a/chrome",
            "/Applications/Chromium.app/Contents/MacOS/Chromium",
            "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
        ];
        let path = "/a:/b:relative";
        let pick = |named: Option<&str>, programs: &[&str]| found(named, path, programs);
        assert_eq!(
            pick(Some("/opt/mine/chrome-for-testing"), &everything),
            Ok(PathBuf::from("/opt/mine/chrome-for-testing"))
        );
        // A name earlier in the list wins over a folder earlier on PATH.
        assert_eq!(pick(None, &everything), Ok(PathBuf::from("/b/chromium")));
        assert_eq!(
            pick(None, &everything[2..]),
            Ok(PathBuf::from("/b/chromium"))
        );
        assert_eq!(
            pick(None, &["/a/google-chrome", "/a/chrome"]),
            Ok(PathBuf::from("/a/google-chrome"))
        );
        assert_eq!(pick(None, &everything[4..]), Ok(PathBuf::from("/a/chrome")));
        assert_eq!(
            pick(None, &everything[5..]),
            Ok(PathBuf::from(MACOS_APPS[0]))
        );
        assert_eq!(
            pick(None, &everything[6..]),
            Ok(PathBuf::from(MACOS_APPS[1]))
        );
        assert_eq!(
            pick(None, &["relative/chromium"]),
            Err(NOT_FOUND.to_owned())
        );
        assert_eq!(pick(None, &[]), Err(NOT_FOUND.to_owned()));
        let wrong = pick(Some("/nowhere/chromium"), &everything);
        assert!(
            matches!(&wrong, Err(why) if why.contains("TETHER_CHROMIUM=/nowhere/chromium")),
            "{wrong:?}"
        );
        // An empty TETHER_CHROMIUM is the same as none.
        assert_eq!(
            pick(Some(""), &everything),
            Ok(PathBuf::from("/b/chromium"))
        );
    }

    #[test]
    fn the_browser_is_held_to_loopback_and_a_throwaway_profile() {
        let switches = switches(Path::new("/tmp/tether-capture-x/profile"), true);
        for expected in [
            "--headless=new",
            "--remote-debugging-pipe",
            "--user-data-dir=/tmp/tether-capture-x/profile",
            "--no-first-run",
            "--disable-extensions",
            "--disable-sync",
            "--proxy-server=http://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE *.localhost, EXCLUDE 127.*, EXCLUDE ::1, EXCLUDE [::1]",
            "--no-sandbox",
        ] {
            assert!(
                switches.iter().any(|s| s == expected),
                "{expected}: {switches:?}"
            );
        }
        assert!(!switches.iter().any(|s| s.contains("remote-debugging-port")));
        let unconfined = super::switches(Path::new("/p"), false);
        assert!(
            !unconfined.iter().any(|s| s == "--no-sandbox"),
            "{unconfined:?}"
        );
    }

    #[test]
    fn the_browser_gets_a_home_of_its_own() {
        let env = vec![
            ("PATH".to_owned(), "/usr/bin".to_owned()),
            ("HOME".to_owned(), "/home/someone".to_owned()),
        ];
        let private = private_env(&env, Path::new("/tmp/c"));
        assert!(private.contains(&("PATH".to_owned(), "/usr/bin".to_owned())));
        assert!(private.contains(&("HOME".to_owned(), "/tmp/c".to_owned())));
        assert!(!private.iter().any(|(_, value)| value == "/home/someone"));
    }
}
