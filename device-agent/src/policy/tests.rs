//! Judgements for every mode, zone and kind of action. Each case is one line: the action,
//! the verdict (`allow`, `ask:allow`, `ask:deny`, `refuse`) and the rule that decides.

use std::path::PathBuf;

use super::*;

/// A home folder with a run's folder, one of the person's own folders, keys, the agent's
/// data; a folder outside the home folder; and a temporary folder, all in a private tree.
struct Fixture {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    notes: PathBuf,
    foreign: PathBuf,
    temp: PathBuf,
    data: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let root = tmp.path().canonicalize().unwrap_or_default();
    let home = root.join("home");
    let fx = Fixture {
        work: home.join("work"),
        notes: home.join("notes"),
        foreign: root.join("srv/shared"),
        temp: root.join("tmp"),
        data: home.join(".local/share/tether-agent"),
        home,
        _tmp: tmp,
    };
    for dir in [&fx.work, &fx.notes, &fx.foreign, &fx.temp, &fx.data] {
        std::fs::create_dir_all(dir).unwrap_or_else(|err| panic!("{err}"));
    }
    std::fs::create_dir_all(fx.home.join(".ssh")).unwrap_or_else(|err| panic!("{err}"));
    fx
}

struct Situation {
    mode: Mode,
    trusted: bool,
    network: bool,
    sandbox: SandboxStrength,
    delivery: Option<Delivery>,
}

fn situation(mode: Mode) -> Situation {
    Situation {
        mode,
        trusted: false,
        network: true,
        sandbox: SandboxStrength::Strong,
        delivery: None,
    }
}

fn policy(fx: &Fixture, situation: &Situation) -> RunPolicy {
    RunPolicy::new(RunSettings {
        mode: situation.mode,
        folder: fx.work.clone(),
        trusted: if situation.trusted {
            vec![fx.work.clone()]
        } else {
            Vec::new()
        },
        network: situation.network,
        sandbox: situation.sandbox,
        guard: Guard::new(Some(fx.home.clone()), &fx.data),
        temporary: vec![fx.temp.clone()],
        delivery: situation.delivery,
    })
}

fn verdict(judgement: &Judgement) -> &'static str {
    match judgement.verdict {
        Verdict::Allow => "allow",
        Verdict::Ask {
            recommended: Answer::Allow,
        } => "ask:allow",
        Verdict::Ask {
            recommended: Answer::Deny,
        } => "ask:deny",
        Verdict::Refuse { .. } => "refuse",
    }
}

/// Checks every `(action, verdict, rule)` line against one policy.
fn check(policy: &RunPolicy, cases: &[(Action, &str, &str)]) {
    for (action, expected_verdict, expected_rule) in cases {
        let judgement = policy.judge(action);
        assert_eq!(
            (verdict(&judgement), judgement.rule.as_str()),
            (*expected_verdict, *expected_rule),
            "{:?} in {:?}: {judgement:?}",
            action,
            policy.mode()
        );
    }
}

fn run(line: &str) -> Action {
    Action::Command {
        argv: line.split_whitespace().map(str::to_owned).collect(),
        cwd: PathBuf::from("."),
    }
}

fn shell(script: &str) -> Action {
    Action::Command {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        cwd: PathBuf::from("."),
    }
}

fn read(path: PathBuf) -> Action {
    Action::ReadFile { path }
}

fn write(path: PathBuf) -> Action {
    Action::WriteFile { path }
}

fn fetch(target: &str) -> Action {
    Action::Network {
        target: target.into(),
    }
}

fn tool(kind: &str) -> Action {
    Action::Tool {
        kind: kind.into(),
        title: format!("a {kind} call"),
    }
}

#[test]
fn actions_hash_their_canonical_form() {
    let action = fetch("example.com");
    assert_eq!(
        canonical_text(&action.canonical()),
        r#"{"kind":"network","target":"example.com"}"#
    );
    // sha256 of the text above, computed independently.
    assert_eq!(
        action.hash(),
        "65c9d48715c9cf45625ccd86a66b6224b7b23e7d940ea2ee0a94b5c4f29b162a"
    );
    assert_ne!(action.hash(), fetch("example.org").hash());
    let command = Action::Command {
        argv: vec!["ls".into()],
        cwd: PathBuf::from("/w"),
    };
    assert_eq!(
        canonical_text(&command.canonical()),
        r#"{"argv":["ls"],"cwd":"/w","kind":"command"}"#
    );
    assert_eq!(command.kind(), "command");
    assert_eq!(command.question(Path::new("/w")), "Run `ls` in /w?");
    assert_eq!(
        shell_line(&["echo".into(), "it's here".into()]),
        r"echo 'it'\''s here'"
    );
}

#[test]
fn the_hard_floor_and_the_guard_refuse_in_every_mode() {
    let fx = fixture();
    for mode in Mode::ALL {
        let policy = policy(&fx, &situation(mode));
        check(
            &policy,
            &[
                (run("sudo ls"), "refuse", "hard-floor:privilege"),
                (shell("ls && shutdown -h now"), "refuse", "hard-floor:power"),
                (
                    run("rm -rf /"),
                    "refuse",
                    "hard-floor:delete-system-or-home",
                ),
                (run("cat ~/.ssh/id_ed25519"), "refuse", "guard"),
                (run("ls ~/.ssh"), "refuse", "guard"),
                (read(fx.home.join(".ssh/id_ed25519")), "refuse", "guard"),
                (read(fx.data.join("seal-key.json")), "refuse", "guard"),
                (read(fx.home.join(".aws/credentials")), "refuse", "guard"),
                (write(fx.home.join(".bashrc")), "refuse", "guard"),
                (write(fx.data.join("config.json")), "refuse", "guard"),
                // Changing a folder that holds keys is changing the keys.
                (write(fx.home.join(".config")), "refuse", "guard"),
                (write(fx.home.clone()), "refuse", "guard"),
                (
                    write(PathBuf::from("/etc/hosts")),
                    "refuse",
                    "system-folder",
                ),
                (
                    write(PathBuf::from("/usr/local/bin/tool")),
                    "refuse",
                    "system-folder",
                ),
                (write(PathBuf::from("/dev/sda")), "refuse", "system-folder"),
                (run(""), "refuse", "empty-command"),
            ],
        );
    }
}

#[test]
fn the_hard_floor_comes_before_any_rule_of_the_run() {
    let fx = fixture();
    let policy = policy(&fx, &situation(Mode::Ask));
    let sudo = run("sudo make install");
    let judgement = policy.judge(&sudo);
    // Even an "allow for this run" of this exact command does not lift the floor.
    policy.add_run_rule(&Judgement {
        grant: Some(Grant::Exact(policy.normalize(&sudo).hash())),
        ..judgement
    });
    check(&policy, &[(sudo, "refuse", "hard-floor:privilege")]);
}

#[test]
fn ask_mode_asks_for_commands_edits_and_the_network() {
    let fx = fixture();
    let policy = policy(&fx, &situation(Mode::Ask));
    check(
        &policy,
        &[
            (run("cargo test"), "ask:allow", "ask-mode-command"),
            (run("touch new.txt"), "ask:allow", "ask-mode-command"),
            (run("ls -la"), "allow", "read-only-command"),
            (run("git status"), "allow", "read-only-command"),
            (run("git log --oneline"), "allow", "read-only-command"),
            (run("grep -rn TODO src"), "allow", "read-only-command"),
            (run("find . -name x"), "allow", "read-only-command"),
            (
                shell("cat a.txt | grep x && wc -l b"),
                "allow",
                "read-only-command",
            ),
            // Not read-only after all, or reading outside the folder: asks.
            (run("find . -delete"), "ask:allow", "ask-mode-command"),
            (shell("ls > listing.txt"), "ask:allow", "ask-mode-command"),
            (shell("ls && rm -f x"), "ask:allow", "ask-mode-command"),
            (run("cat ../notes/todo.md"), "ask:allow", "ask-mode-command"),
            (run("ls /srv"), "ask:allow", "ask-mode-command"),
            (
                run("curl https://example.com"),
                "ask:allow",
                "remote-command",
            ),
            (run("git push origin main"), "ask:allow", "remote-command"),
            (
                read(fx.work.join("src/main.rs")),
                "allow",
                "read-inside-folder",
            ),
            (
                read(PathBuf::from("src/main.rs")),
                "allow",
                "read-inside-folder",
            ),
            (
                read(fx.notes.join("todo.md")),
                "allow",
                "read-outside-folder",
            ),
            (read(fx.temp.join("x")), "allow", "read-temporary"),
            (
                write(fx.work.join("src/main.rs")),
                "ask:allow",
                "ask-mode-edit",
            ),
            (write(fx.temp.join("scratch")), "ask:allow", "ask-mode-edit"),
            (write(fx.notes.join("todo.md")), "ask:allow", "other-folder"),
            (write(fx.foreign.join("x")), "ask:deny", "other-folder"),
            (
                fetch("https://example.com/x"),
                "ask:allow",
                "ask-mode-network",
            ),
            (tool("think"), "allow", "quiet-tool"),
            (tool("search"), "allow", "quiet-tool"),
            (tool("other"), "ask:allow", "ask-mode-tool"),
        ],
    );
}

#[test]
fn a_trusted_folder_quiets_ask_mode_there_only() {
    let fx = fixture();
    let policy = policy(
        &fx,
        &Situation {
            trusted: true,
            ..situation(Mode::Ask)
        },
    );
    check(
        &policy,
        &[
            (run("cargo test"), "allow", "trusted-folder"),
            (
                write(fx.work.join("src/main.rs")),
                "allow",
                "trusted-folder",
            ),
            (run("cat ../notes/todo.md"), "allow", "read-only-command"),
            (run("cp a ../notes/b"), "ask:allow", "other-folder"),
            (write(fx.notes.join("todo.md")), "ask:allow", "other-folder"),
            (write(fx.temp.join("scratch")), "ask:allow", "ask-mode-edit"),
            (fetch("example.com"), "ask:allow", "ask-mode-network"),
            (run("ssh host"), "ask:allow", "remote-command"),
            (tool("other"), "ask:allow", "ask-mode-tool"),
        ],
    );
}

#[test]
fn review_mode_works_in_the_folder_and_asks_beyond_it() {
    let fx = fixture();
    let policy = policy(&fx, &situation(Mode::Review));
    let copy_to = |to: &Path| Action::Command {
        argv: vec!["cp".into(), "a".into(), to.display().to_string()],
        cwd: PathBuf::from("."),
    };
    check(
        &policy,
        &[
            (run("cargo test"), "allow", "inside-folder"),
            (run("rm -rf build"), "allow", "inside-folder"),
            (run("cat ../notes/todo.md"), "allow", "read-only-command"),
            (run("ls /srv"), "allow", "read-only-command"),
            // System folders cannot be changed under a sandbox: naming them is reading.
            (run("cp /usr/share/dict/words ."), "allow", "inside-folder"),
            (copy_to(&fx.notes.join("b")), "ask:allow", "other-folder"),
            (copy_to(&fx.foreign.join("b")), "ask:deny", "other-folder"),
            (copy_to(&fx.temp.join("b")), "allow", "inside-folder"),
            (run("ssh host uptime"), "ask:allow", "remote-command"),
            (
                run("rsync -a out/ host:backup/"),
                "ask:allow",
                "remote-command",
            ),
            (shell("make && git push"), "ask:allow", "remote-command"),
            (
                read(fx.notes.join("todo.md")),
                "allow",
                "read-outside-folder",
            ),
            (write(fx.work.join("src/main.rs")), "allow", "inside-folder"),
            (write(fx.temp.join("scratch")), "allow", "temporary-folder"),
            (
                write(PathBuf::from("/dev/null")),
                "allow",
                "temporary-folder",
            ),
            (write(fx.notes.join("todo.md")), "ask:allow", "other-folder"),
            (write(fx.foreign.join("x")), "ask:deny", "other-folder"),
            (fetch("example.com"), "allow", "network-on"),
            (tool("other"), "allow", "engine-tool"),
        ],
    );
    let question = policy.judge(&write(fx.notes.join("todo.md")));
    assert_eq!(question.kind, "folder");
    assert_eq!(question.grant, Some(Grant::Folder(fx.notes.clone())));
    assert!(
        question.question.starts_with(&format!(
            "Let this run change files in {}?",
            fx.notes.display()
        )),
        "{}",
        question.question
    );
}

#[test]
fn without_a_sandbox_commands_and_tools_ask() {
    let fx = fixture();
    let advisory = |mode| Situation {
        sandbox: SandboxStrength::Advisory,
        ..situation(mode)
    };
    check(
        &policy(&fx, &advisory(Mode::Review)),
        &[
            (run("cargo test"), "ask:allow", "unsandboxed"),
            (run("cp a ../notes/b"), "ask:deny", "unsandboxed"),
            (run("ls"), "allow", "read-only-command"),
            (tool("other"), "ask:deny", "unsandboxed"),
            (write(fx.work.join("x")), "allow", "inside-folder"),
        ],
    );
    check(
        &policy(&fx, &advisory(Mode::Unattended)),
        &[
            (run("cargo test"), "allow", "unsandboxed"),
            (run("cp a ../notes/b"), "refuse", "unsandboxed"),
            (tool("other"), "refuse", "unsandboxed"),
        ],
    );
}

#[test]
fn with_the_network_off_reaching_out_is_refused() {
    let fx = fixture();
    for mode in Mode::ALL {
        let policy = policy(
            &fx,
            &Situation {
                network: false,
                ..situation(mode)
            },
        );
        check(
            &policy,
            &[
                (fetch("https://example.com"), "refuse", "network-off"),
                (run("curl https://example.com"), "refuse", "network-off"),
                (run("git fetch"), "refuse", "network-off"),
                (shell("ls; ssh host"), "refuse", "network-off"),
            ],
        );
    }
}

#[test]
fn unattended_never_asks_and_takes_the_recommended_answer() {
    let fx = fixture();
    let policy = policy(&fx, &situation(Mode::Unattended));
    check(
        &policy,
        &[
            (run("cargo test"), "allow", "inside-folder"),
            (write(fx.notes.join("todo.md")), "allow", "other-folder"),
            (write(fx.foreign.join("x")), "refuse", "other-folder"),
            (write(fx.home.join(".cache/x")), "refuse", "other-folder"),
            (run("git push"), "allow", "remote-command"),
            (fetch("example.com"), "allow", "network-on"),
            (write(fx.temp.join("x")), "allow", "temporary-folder"),
            (write(fx.work.join("src/lib.rs")), "allow", "inside-folder"),
            (
                read(fx.notes.join("todo.md")),
                "allow",
                "read-outside-folder",
            ),
            (read(fx.temp.join("x")), "allow", "read-temporary"),
            (
                read(PathBuf::from("README.md")),
                "allow",
                "read-inside-folder",
            ),
            (run("cat /srv/x"), "allow", "read-only-command"),
            (tool("other"), "allow", "engine-tool"),
            (tool("think"), "allow", "quiet-tool"),
        ],
    );
    let taken = policy.judge(&write(fx.notes.join("todo.md")));
    assert!(taken.unattended);
    let refused = policy.judge(&write(fx.foreign.join("x")));
    assert!(refused.unattended);
    assert!(
        matches!(&refused.verdict, Verdict::Refuse { reason } if reason.starts_with("unattended mode asks nobody"))
    );
    assert!(!policy.judge(&run("cargo test")).unattended);
}

#[test]
fn run_rules_answer_before_asking() {
    let fx = fixture();
    let review = policy(&fx, &situation(Mode::Review));
    let asked = review.judge(&write(fx.notes.join("todo.md")));
    review.add_run_rule(&asked);
    check(
        &review,
        &[
            (write(fx.notes.join("todo.md")), "allow", "run-rule"),
            (write(fx.notes.join("deep/new.md")), "allow", "run-rule"),
            (run("cp a ../notes/b"), "allow", "inside-folder"),
            (write(fx.foreign.join("x")), "ask:deny", "other-folder"),
        ],
    );
    assert_eq!(
        review.run_rules(),
        [format!("changes inside {}", fx.notes.display())]
    );

    let ask = policy(&fx, &situation(Mode::Ask));
    // A command: exactly that command again.
    ask.add_run_rule(&ask.judge(&run("cargo test")));
    // An edit in the folder: every edit in the folder, but not commands.
    ask.add_run_rule(&ask.judge(&write(fx.work.join("a.rs"))));
    // The network: that host.
    ask.add_run_rule(&ask.judge(&fetch("https://example.com/a")));
    // A file right in the home folder: too broad a folder, so that once only.
    let broad = ask.judge(&write(fx.home.join("file.txt")));
    assert!(matches!(broad.grant, Some(Grant::Exact(_))), "{broad:?}");
    ask.add_run_rule(&broad);
    check(
        &ask,
        &[
            (run("cargo test"), "allow", "run-rule"),
            (run("cargo build"), "ask:allow", "ask-mode-command"),
            (write(fx.work.join("b/c.rs")), "allow", "run-rule"),
            (run("touch x"), "ask:allow", "ask-mode-command"),
            (fetch("https://EXAMPLE.com/b?x=1"), "allow", "run-rule"),
            (
                fetch("https://example.org/"),
                "ask:allow",
                "ask-mode-network",
            ),
            (write(fx.home.join("file.txt")), "allow", "run-rule"),
            (write(fx.home.join("other.txt")), "ask:deny", "other-folder"),
        ],
    );
}

#[cfg(unix)]
#[test]
fn a_link_out_of_the_folder_is_outside() {
    let fx = fixture();
    std::os::unix::fs::symlink(&fx.notes, fx.work.join("link"))
        .unwrap_or_else(|err| panic!("{err}"));
    std::os::unix::fs::symlink(fx.home.join(".ssh"), fx.work.join("keys"))
        .unwrap_or_else(|err| panic!("{err}"));
    let policy = policy(&fx, &situation(Mode::Review));
    check(
        &policy,
        &[
            (
                write(fx.work.join("link/x.md")),
                "ask:allow",
                "other-folder",
            ),
            // `..` climbs from where the link leads (the home folder), not from the link.
            (
                write(PathBuf::from("link/../x.md")),
                "ask:deny",
                "other-folder",
            ),
            (read(PathBuf::from("keys/id_ed25519")), "refuse", "guard"),
            (run("cat keys/id_ed25519"), "refuse", "guard"),
            (run("cp a link"), "ask:allow", "other-folder"),
        ],
    );
    let ask = self::policy(&fx, &situation(Mode::Ask));
    check(
        &ask,
        &[(run("cat link/x.md"), "ask:allow", "ask-mode-command")],
    );
}

#[test]
fn commands_outside_the_folder_are_judged_where_they_run() {
    let fx = fixture();
    let policy = policy(&fx, &situation(Mode::Review));
    let in_notes = |line: &str| Action::Command {
        argv: line.split_whitespace().map(str::to_owned).collect(),
        cwd: fx.notes.clone(),
    };
    check(
        &policy,
        &[
            (in_notes("ls"), "allow", "read-only-command"),
            (in_notes("make"), "ask:allow", "other-folder"),
            (shell("cd ../notes && make"), "ask:allow", "other-folder"),
        ],
    );
    let question = policy.judge(&in_notes("make"));
    assert!(
        question.question.contains("`make`"),
        "{}",
        question.question
    );
}

#[test]
fn every_rule_is_documented() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/POLICY.md"))
        .unwrap_or_else(|err| panic!("{err}"));
    for rule in Rule::ALL {
        assert!(
            docs.contains(&format!("`{}", rule.name())),
            "{} is not in docs/POLICY.md",
            rule.name()
        );
        assert!(!rule.summary().is_empty());
    }
}

fn argv(words: &[&str]) -> Action {
    Action::Command {
        argv: words.iter().map(|word| (*word).to_owned()).collect(),
        cwd: PathBuf::from("."),
    }
}

#[test]
fn git_told_to_obey_programs_later_is_refused_in_every_mode() {
    let fx = fixture();
    for mode in Mode::ALL {
        let policy = policy(&fx, &situation(mode));
        let refused = |action: Action| (action, "refuse", "git-programs");
        check(
            &policy,
            &[
                refused(run("git -c core.hooksPath=/tmp/x commit -m x")),
                refused(run("git -ccore.sshCommand=x fetch")),
                refused(run("git -c alias.st=!sh status")),
                refused(run("git -c Core.FsMonitor=./x status")),
                refused(run("git --git-dir=/x log")),
                refused(run("git --work-tree=/x status")),
                refused(run("git --exec-path=/tmp status")),
                refused(run("git --config-env=core.pager=X log")),
                refused(run("git -C /srv/other status")),
                refused(run("git -C .. status")),
                refused(argv(&["git", "config", "--global", "alias.x", "!sh"])),
                refused(run("git config include.path x")),
                refused(run("git config --file .git/config core.fsmonitor x")),
                refused(run("git config core.hooksPath hooks")),
                refused(run("git config --add filter.lfs.clean x")),
                refused(run("git config diff.pdf.textconv x")),
                refused(run("git config --unset core.hooksPath")),
                refused(run("git config set core.pager less")),
                refused(run("git config remote.origin.url https://evil.example/x")),
                refused(run("git config credential.helper store")),
                refused(run("git config -e")),
                refused(run("git config --rename-section foo alias")),
                refused(run("git config includeIf.gitdir:/x.path y")),
                refused(run("git fetch --upload-pack=/tmp/x origin")),
                refused(run("git fetch --upload=/tmp/x origin")),
                refused(run("git push --receive-pack=x origin")),
                refused(run("git push --exec=x origin")),
                refused(run("git clone -u /tmp/x https://example.com/r")),
                refused(run("git ls-remote -u /tmp/x origin")),
                refused(run("git clone --template=/tmp/t https://example.com/r")),
                refused(run(
                    "git clone -c core.hooksPath=/tmp https://example.com/r",
                )),
                refused(run("git rebase --exec make main")),
                refused(run("GIT_CONFIG_PARAMETERS='core.pager=x' git log")),
                refused(run("env GIT_SSH_COMMAND=x git fetch")),
                refused(run("env GIT_DIR=/x git log")),
                refused(run("env GIT_CONFIG_COUNT=1 make")),
                refused(shell("GIT_EXEC_PATH=/tmp git status")),
                refused(shell("ls && git -c core.pager=x log")),
                refused(shell("cd src; git config core.hooksPath /tmp/h")),
                refused(argv(&["bash", "-lc", "git --git-dir=/x log"])),
                refused(argv(&[
                    "timeout",
                    "5",
                    "git",
                    "-c",
                    "core.sshCommand=x",
                    "fetch",
                ])),
                refused(argv(&["env", "-S", "git -c core.pager=x log"])),
                refused(argv(&[
                    "find",
                    ".",
                    "-exec",
                    "git",
                    "--git-dir=/x",
                    "log",
                    ";",
                ])),
                refused(argv(&["sh", "-c", "eval 'git config core.pager x'"])),
            ],
        );
    }
}

/// Checks that each action goes ahead, whichever rule lets it.
fn check_allowed(policy: &RunPolicy, actions: &[Action]) {
    for action in actions {
        let judgement = policy.judge(action);
        assert_eq!(verdict(&judgement), "allow", "{action:?}: {judgement:?}");
    }
}

#[test]
fn ordinary_git_goes_ahead() {
    let fx = fixture();
    check_allowed(
        &policy(&fx, &situation(Mode::Unattended)),
        &[
            run("git status"),
            run("git --no-pager log --oneline"),
            run("git config --get user.name"),
            run("git config --list --show-origin"),
            run("git config -l"),
            run("git config core.hooksPath"),
            run("git config get core.hooksPath"),
            run("git config user.name Tether"),
            run("git config --local user.email me@example.com"),
            run("git config branch.main.rebase true"),
            run("git config advice.detachedHead false"),
            run("git config pull.rebase false"),
            run("git -c user.name=T -c user.email=t@example.com commit -m x"),
            run("git -C . status --short"),
            run("git --version"),
            run("GIT_AUTHOR_NAME=T git commit -m x"),
            shell("GIT_EDITOR=true git rebase --continue"),
            run("git stash"),
            run("git commit -m x"),
            run("git tag v1"),
            run("git fetch -u origin"),
        ],
    );
}

#[test]
fn local_delivery_refuses_commits_only() {
    let fx = fixture();
    let local = Situation {
        delivery: Some(Delivery::Local),
        ..situation(Mode::Unattended)
    };
    let refused = |action: Action| (action, "refuse", "git-local-delivery");
    check(
        &policy(&fx, &local),
        &[
            refused(run("git commit -m x")),
            refused(run("git -C . commit --amend --no-edit")),
            refused(run("git merge feature")),
            refused(run("git rebase main")),
            refused(run("git rebase --continue")),
            refused(run("git cherry-pick abc")),
            refused(run("git revert HEAD")),
            refused(run("git tag v1")),
            refused(run("git am patch.mbox")),
            refused(run("git pull")),
            refused(run("git pull --rebase --ff-only")),
            refused(run("git commit-tree HEAD^{tree}")),
            refused(run("git update-ref refs/heads/main HEAD")),
            refused(run("git notes add -m x")),
            refused(shell("git add -A && git commit -m wip")),
            refused(argv(&["env", "LANG=C", "git", "commit", "-m", "x"])),
        ],
    );
    check_allowed(
        &policy(&fx, &local),
        &[
            run("git tag --list"),
            run("git status"),
            run("git tag"),
            run("git stash"),
            run("git stash pop"),
            run("git add -A"),
            run("git checkout -b topic"),
            run("git merge --abort"),
            run("git rebase --abort"),
            run("git notes"),
            run("git pull --ff-only"),
        ],
    );
    // Other deliveries commit on purpose.
    let commit = Situation {
        delivery: Some(Delivery::Commit),
        ..situation(Mode::Unattended)
    };
    check_allowed(&policy(&fx, &commit), &[run("git commit -m x")]);
}

#[test]
fn git_keys_and_variables_follow_the_safe_lists() {
    for key in [
        "user.name",
        "USER.Email",
        "branch.feature/x.merge",
        "branch.main.Rebase",
        "advice.detachedHead",
        "init.defaultBranch",
        "core.autocrlf",
    ] {
        assert!(git::safe_key(key), "{key}");
    }
    for key in [
        "",
        "user",
        "user.signingkey",
        "core.hooksPath",
        "core.sshCommand",
        "core.fsmonitor",
        "core.pager",
        "include.path",
        "includeIf.gitdir:~/x.path",
        "alias.st",
        "diff.external",
        "diff.pdf.textconv",
        "filter.lfs.smudge",
        "credential.helper",
        "credential.https://example.com.helper",
        "remote.origin.url",
        "remote.origin.push",
        "remote.origin.uploadpack",
        "branch.main.remote",
        "branch..merge",
        "push.default",
        "gpg.program",
        "sequence.editor",
        "advice.",
    ] {
        assert!(!git::safe_key(key), "{key}");
    }
    for name in ["PATH", "GIT_AUTHOR_NAME", "GIT_EDITOR", "git_dir"] {
        assert!(git::safe_variable(name), "{name}");
    }
    for name in [
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_KEY_0",
        "GIT_CONFIG_GLOBAL",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_EXEC_PATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "GIT_PROXY_COMMAND",
        "GIT_EXTERNAL_DIFF",
        "GIT_TEMPLATE_DIR",
    ] {
        assert!(!git::safe_variable(name), "{name}");
    }
}
