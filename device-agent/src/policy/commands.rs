//! What a command line does, as far as the policy needs to know: whether it only reads,
//! whether it reaches another computer, and which paths it names.
//!
//! The reading is deliberately conservative: anything it cannot follow (a substitution, a
//! variable, a redirection into a file, a background job, a wrapper with unknown options, a
//! script file) makes the command "not read-only", so it is judged like any other command.
//! The hard floor splits scripts aggressively to find more; this module may only ever find
//! less, never call a changing command read-only.

use std::path::{Path, PathBuf};

use super::{git, zones};

/// Nesting deeper than this (`sh -c "sh -c …"`) is not followed: the command is then not
/// read-only.
const MAX_DEPTH: usize = 4;

/// What a command line does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFacts {
    /// Every simple command in it only reads (or prints); nothing in it writes a file.
    pub read_only: bool,
    /// Some simple command in it reaches another computer (ssh, curl, git push, …).
    pub remote: bool,
    /// The first program that reaches another computer, for the question.
    pub remote_program: Option<String>,
    /// Every path it names, resolved: working folders (`cd`), operands, redirection targets.
    pub paths: Vec<PathBuf>,
}

/// Analyses `argv` started in `cwd` (already resolved). `home` expands `~`.
pub fn analyse(argv: &[String], cwd: &Path, home: Option<&Path>) -> CommandFacts {
    let mut facts = CommandFacts {
        read_only: true,
        remote: false,
        remote_program: None,
        paths: vec![cwd.to_path_buf()],
    };
    let mut cwd = cwd.to_path_buf();
    analyse_into(argv, &mut cwd, home, &mut facts, 0);
    facts.paths.sort();
    facts.paths.dedup();
    facts
}

fn analyse_into(
    argv: &[String],
    cwd: &mut PathBuf,
    home: Option<&Path>,
    facts: &mut CommandFacts,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        facts.read_only = false;
        return;
    }
    let Some(words) = unwrap(argv) else {
        facts.read_only = false;
        return;
    };
    let Some(program) = words.first() else {
        return;
    };
    let name = basename(program);
    let args = &words[1..];
    if is_shell(&name) {
        match shell_script(&name, args) {
            Some(script) => analyse_script(&script, cwd, home, facts, depth + 1),
            // A shell running a script file: what it does is not visible here.
            None => facts.read_only = false,
        }
        return;
    }
    if name == "cd" {
        let target = args
            .iter()
            .find(|arg| !arg.starts_with('-'))
            .map_or_else(|| PathBuf::from("~"), PathBuf::from);
        *cwd = zones::resolve(cwd, &target, home);
        facts.paths.push(cwd.clone());
        return;
    }
    if !read_only_program(&name, args) {
        facts.read_only = false;
    }
    if reaches_network(&name, args) {
        facts.remote = true;
        facts.remote_program.get_or_insert(name.clone());
    }
    for operand in path_operands(&name, args, cwd) {
        facts
            .paths
            .push(zones::resolve(cwd, Path::new(&operand), home));
    }
}

fn analyse_script(
    script: &str,
    cwd: &mut PathBuf,
    home: Option<&Path>,
    facts: &mut CommandFacts,
    depth: usize,
) {
    let parsed = Script::parse(script);
    if !parsed.plain {
        facts.read_only = false;
    }
    for target in &parsed.writes {
        facts.read_only = false;
        facts
            .paths
            .push(zones::resolve(cwd, Path::new(target), home));
    }
    for source in &parsed.reads {
        facts
            .paths
            .push(zones::resolve(cwd, Path::new(source), home));
    }
    for command in &parsed.commands {
        analyse_into(command, cwd, home, facts, depth);
    }
}

/// Programs that only read or print, whatever their operands (with the exceptions in
/// [`read_only_program`]).
const READ_ONLY: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "pwd",
    "echo",
    "printf",
    "stat",
    "file",
    "du",
    "df",
    "tree",
    "diff",
    "cmp",
    "cut",
    "nl",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "which",
    "true",
    "false",
    "test",
    "[",
    "whoami",
    "id",
    "uname",
    "printenv",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "od",
    "hexdump",
    "strings",
    "column",
    "jq",
    "tac",
    "rev",
    "paste",
    "comm",
    "expand",
    "type",
    "sort",
    "uniq",
    "date",
    "env",
    "hostname",
    "ps",
    "uptime",
    "free",
];

/// Whether one simple command (already unwrapped) only reads.
fn read_only_program(name: &str, args: &[String]) -> bool {
    let has = |flag: &str| args.iter().any(|arg| arg == flag);
    let has_prefix = |prefix: &str| args.iter().any(|arg| arg.starts_with(prefix));
    match name {
        "find" => !args.iter().any(|arg| {
            matches!(
                arg.as_str(),
                "-exec"
                    | "-execdir"
                    | "-ok"
                    | "-okdir"
                    | "-delete"
                    | "-fprint"
                    | "-fprint0"
                    | "-fprintf"
                    | "-fls"
            )
        }),
        "git" => git_read_only(args),
        "sed" => sed_read_only(args),
        // `rg --pre CMD` runs a program on every file.
        "rg" => !has_prefix("--pre"),
        // `--compress-program` runs a program.
        "sort" => !has("-o") && !has_prefix("--output") && !has_prefix("--compress-program"),
        // `uniq IN OUT` writes OUT.
        "uniq" => operands(args).len() <= 1,
        "tree" => !has("-o"),
        "date" => !has("-s") && !has_prefix("--set"),
        "hostname" | "env" => args.is_empty(),
        _ => READ_ONLY.contains(&name),
    }
}

/// `git status`, `log`, `diff`, `show`, … without options that write or run programs.
fn git_read_only(args: &[String]) -> bool {
    let Some((subcommand, rest)) = git_subcommand(args) else {
        return false;
    };
    // Configuration given for the command: never taken for reading only.
    if args.iter().any(|arg| arg.starts_with("-c")) {
        return false;
    }
    if rest.iter().any(|arg| {
        arg.starts_with("--output")
                || arg == "--ext-diff"
                || arg.starts_with("--exec")
                // `git grep -O` opens the files in a pager: a program of git's choosing.
                || arg == "-O"
                || arg.starts_with("--open-files-in-pager")
    }) {
        return false;
    }
    let first = rest
        .iter()
        .find(|arg| !arg.starts_with('-'))
        .map(String::as_str);
    match subcommand {
        "status" | "log" | "diff" | "show" | "blame" | "ls-files" | "ls-tree" | "rev-parse"
        | "describe" | "shortlog" | "grep" | "cat-file" | "rev-list" | "diff-tree"
        | "diff-files" | "diff-index" | "merge-base" | "name-rev" | "show-ref" | "for-each-ref"
        | "count-objects" | "check-ignore" | "whatchanged" => true,
        "branch" => rest.iter().all(|arg| {
            matches!(
                arg.as_str(),
                "-a" | "-r" | "-v" | "-vv" | "--list" | "--all" | "--remotes" | "--show-current"
            )
        }),
        "tag" => rest.iter().all(|arg| arg == "-l" || arg == "--list"),
        "remote" => rest.iter().all(|arg| arg == "-v" || arg == "--verbose"),
        "stash" | "worktree" => first == Some("list"),
        "reflog" => first.is_none() || first == Some("show"),
        "config" => rest.iter().any(|arg| {
            matches!(
                arg.as_str(),
                "--get" | "--get-all" | "--get-regexp" | "--list" | "-l"
            )
        }),
        _ => false,
    }
}

/// The subcommand of `git [global options] SUBCOMMAND …`; `None` when a global option could
/// change what git runs (`-c` of a key off the safe list, `--exec-path`, `--config-env`).
fn git_subcommand(args: &[String]) -> Option<(&str, &[String])> {
    let safe_pair = |pair: &str| git::safe_key(pair.split_once('=').map_or(pair, |(key, _)| key));
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        match arg.as_str() {
            "-C" => index += 2,
            "-c" if args.get(index + 1).is_some_and(|pair| safe_pair(pair)) => index += 2,
            _ if arg.len() > 2 && arg.starts_with("-c") && safe_pair(&arg[2..]) => index += 1,
            "-c" | "--config-env" => return None,
            _ if arg.starts_with("--exec-path") || arg.starts_with("--config-env") => return None,
            _ if arg.starts_with('-') => index += 1,
            subcommand => return Some((subcommand, &args[index + 1..])),
        }
    }
    None
}

/// `sed` that only prints: no in-place editing, and every script an address with `p`, `=`
/// or nothing (`sed -n 10,20p FILE`, `sed -n '/error/p'`).
fn sed_read_only(args: &[String]) -> bool {
    let mut scripts = Vec::new();
    let mut index = 0;
    let mut explicit = false;
    while let Some(arg) = args.get(index) {
        match arg.as_str() {
            "-e" | "--expression" => {
                explicit = true;
                scripts.extend(args.get(index + 1).cloned());
                index += 2;
                continue;
            }
            "-n" | "--quiet" | "--silent" | "-E" | "-r" | "--regexp-extended" | "-s"
            | "--separate" | "-u" | "-z" | "--" => {}
            _ if arg.starts_with('-') => return false,
            _ => {}
        }
        index += 1;
    }
    if !explicit {
        let Some(script) = args.iter().find(|arg| !arg.starts_with('-')) else {
            return false;
        };
        scripts.push(script.clone());
    }
    scripts.iter().all(|script| print_only_sed(script))
}

fn print_only_sed(script: &str) -> bool {
    let body = script.trim();
    let body = body
        .strip_suffix('p')
        .or_else(|| body.strip_suffix('='))
        .unwrap_or(body)
        .trim();
    let numeric = body
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, ',' | '$' | ' '));
    let pattern = body.len() >= 2
        && body.starts_with('/')
        && body.ends_with('/')
        && body[1..body.len() - 1]
            .chars()
            .all(|c| c != '/' && c != '\n');
    numeric || pattern
}

/// Whether one simple command (already unwrapped) reaches another computer.
fn reaches_network(name: &str, args: &[String]) -> bool {
    match name {
        "ssh" | "scp" | "sftp" | "mosh" | "telnet" | "ftp" | "lftp" | "nc" | "ncat" | "netcat"
        | "socat" | "curl" | "wget" | "http" | "https" | "xh" | "aria2c" | "gh" => true,
        "rsync" => operands(args).iter().any(|operand| {
            operand.starts_with("rsync://")
                || operand
                    .split_once(':')
                    .is_some_and(|(host, _)| !host.is_empty() && !host.contains('/'))
        }),
        "git" => match git_subcommand(args) {
            Some((subcommand, rest)) => {
                let first = rest
                    .iter()
                    .find(|arg| !arg.starts_with('-'))
                    .map(String::as_str);
                match subcommand {
                    "push" | "fetch" | "pull" | "clone" | "ls-remote" | "send-email" => true,
                    "submodule" => matches!(first, Some("update" | "sync" | "add")),
                    "remote" => matches!(first, Some("update" | "show" | "prune")),
                    _ => false,
                }
            }
            // Options that could run anything: take it as reaching out too.
            None => args.iter().any(|arg| arg == "-c"),
        },
        _ => false,
    }
}

/// The words of a command that may name files: non-option operands (less the pattern of
/// grep-like programs and the script of sed), values of `--option=/path`, and any word that
/// exists relative to `cwd` (a link can lead out of the folder).
fn path_operands(name: &str, args: &[String], cwd: &Path) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let skip_first = match name {
        "grep" | "egrep" | "fgrep" | "rg" => !args.iter().any(|arg| {
            arg == "-e" || arg == "-f" || arg.starts_with("--regexp") || arg.starts_with("--file")
        }),
        "jq" | "sed" | "awk" => true,
        _ => false,
    };
    let mut skipped = !skip_first;
    let find_roots = name == "find";
    let mut in_expression = false;
    for arg in args {
        if let Some(option) = arg.strip_prefix('-') {
            if find_roots {
                in_expression = true;
            }
            if let Some((_, value)) = option.split_once('=') {
                if looks_like_path(value) {
                    words.push(value.to_owned());
                }
            }
            continue;
        }
        if in_expression {
            continue;
        }
        if !skipped {
            skipped = true;
            continue;
        }
        if looks_like_path(arg) || cwd.join(arg).symlink_metadata().is_ok() {
            words.push(arg.clone());
        }
    }
    words
}

fn looks_like_path(word: &str) -> bool {
    !word.contains("://")
        && (word.starts_with('/')
            || word.starts_with('~')
            || word.starts_with('.')
            || word.starts_with("$HOME")
            || word.starts_with("${HOME}")
            || word.contains('/'))
}

fn operands(args: &[String]) -> Vec<&String> {
    args.iter().filter(|arg| !arg.starts_with('-')).collect()
}

/// Strips wrappers that start another program (`env NAME=V`, `timeout N`, `nice`, `nohup`,
/// `time`, `command`, `stdbuf`). `None` when a wrapper's options are not understood.
fn unwrap(argv: &[String]) -> Option<&[String]> {
    let mut words = argv;
    loop {
        let Some(program) = words.first() else {
            return Some(words);
        };
        let rest = &words[1..];
        let skip = match basename(program).as_str() {
            "env" if rest.is_empty() => return Some(words),
            "env" => {
                let assignments = rest
                    .iter()
                    .take_while(|word| !word.starts_with('-') && word.contains('='))
                    .count();
                if rest
                    .get(assignments)
                    .is_some_and(|word| word.starts_with('-'))
                {
                    return None;
                }
                assignments
            }
            "timeout" => match rest.first() {
                Some(duration) if !duration.starts_with('-') => 1,
                _ => return None,
            },
            "nice" => match rest.first().map(String::as_str) {
                Some("-n") => 2,
                Some(word) if word.starts_with('-') => 1,
                _ => 0,
            },
            "nohup" | "time" | "command" => 0,
            "stdbuf" => rest.iter().take_while(|word| word.starts_with('-')).count(),
            _ => return Some(words),
        };
        if skip >= rest.len() {
            return Some(&[]);
        }
        words = &rest[skip..];
    }
}

fn basename(program: &str) -> String {
    Path::new(program).file_name().map_or_else(
        || program.to_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}

fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "busybox" | "fish"
    )
}

/// The script of `sh -c SCRIPT`, `bash -lc SCRIPT`, `bash -e -c SCRIPT`.
fn shell_script(name: &str, args: &[String]) -> Option<String> {
    if name == "busybox" {
        return None;
    }
    let mut index = 0;
    let mut wants_script = false;
    while let Some(word) = args.get(index) {
        let Some(flags) = word.strip_prefix('-') else {
            break;
        };
        if flags.starts_with('-') {
            return None;
        }
        if flags.contains('c') {
            wants_script = true;
        }
        if flags.ends_with('o') {
            index += 1;
        }
        index += 1;
    }
    wants_script.then(|| args.get(index).cloned()).flatten()
}

/// A shell script read conservatively.
#[derive(Debug, Default, PartialEq, Eq)]
struct Script {
    /// Its simple commands, in order.
    commands: Vec<Vec<String>>,
    /// Files it redirects output into (never `/dev/null` or a descriptor).
    writes: Vec<String>,
    /// Files it redirects input from.
    reads: Vec<String>,
    /// Nothing in it was beyond this reading: no substitution, variable, glob, here-document,
    /// background job, subshell or group.
    plain: bool,
}

/// What the next word of a script is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Word,
    Output,
    Input,
}

impl Script {
    fn parse(script: &str) -> Script {
        let mut parser = Parser {
            script: Script {
                plain: true,
                ..Script::default()
            },
            command: Vec::new(),
            word: String::new(),
            in_word: false,
            next: Next::Word,
        };
        parser.run(script);
        parser.script
    }
}

struct Parser {
    script: Script,
    command: Vec<String>,
    word: String,
    in_word: bool,
    next: Next,
}

impl Parser {
    fn run(&mut self, text: &str) {
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    self.in_word = true;
                    for next in chars.by_ref() {
                        if next == '\'' {
                            break;
                        }
                        self.word.push(next);
                    }
                }
                '"' => {
                    self.in_word = true;
                    while let Some(next) = chars.next() {
                        match next {
                            '"' => break,
                            '\\' => self.word.extend(chars.next()),
                            '$' | '`' => {
                                self.script.plain = false;
                                self.word.push(next);
                            }
                            _ => self.word.push(next),
                        }
                    }
                }
                '\\' => {
                    if let Some(next) = chars.next() {
                        if next != '\n' {
                            self.word.push(next);
                            self.in_word = true;
                        }
                    }
                }
                '#' if !self.in_word => {
                    for next in chars.by_ref() {
                        if next == '\n' {
                            break;
                        }
                    }
                    self.end_command();
                }
                ' ' | '\t' => self.end_word(),
                ';' | '\n' | '|' => {
                    if c == '|' && chars.peek() == Some(&'&') {
                        chars.next();
                    }
                    self.end_command();
                }
                '&' => {
                    if chars.peek() == Some(&'&') {
                        chars.next();
                    } else if chars.peek() == Some(&'>') {
                        // `&> FILE`: both outputs into a file.
                        chars.next();
                        self.redirect(Next::Output, &mut chars);
                        continue;
                    } else {
                        // A background job outlives what is judged here.
                        self.script.plain = false;
                    }
                    self.end_command();
                }
                '>' => self.redirect(Next::Output, &mut chars),
                '<' => {
                    if matches!(chars.peek(), Some('<' | '(')) {
                        // Here-documents and process substitution.
                        self.script.plain = false;
                    }
                    self.redirect(Next::Input, &mut chars);
                }
                '(' | ')' | '{' | '}' | '`' => {
                    self.script.plain = false;
                    self.end_command();
                }
                '$' | '*' | '?' | '[' => {
                    self.script.plain = false;
                    self.word.push(c);
                    self.in_word = true;
                }
                _ => {
                    self.word.push(c);
                    self.in_word = true;
                }
            }
        }
        self.end_command();
    }

    /// A redirection: a leading file-descriptor number belongs to it (`2>`), a `&N` target
    /// is a descriptor, not a file.
    fn redirect(&mut self, kind: Next, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        if self.in_word && self.word.chars().all(|c| c.is_ascii_digit()) {
            self.word.clear();
            self.in_word = false;
        } else {
            self.end_word();
        }
        while matches!(chars.peek(), Some('>' | '|')) {
            chars.next();
        }
        if chars.peek() == Some(&'&') {
            chars.next();
            while chars
                .peek()
                .is_some_and(|c| c.is_ascii_digit() || *c == '-')
            {
                chars.next();
            }
            return;
        }
        self.next = kind;
    }

    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        self.in_word = false;
        match std::mem::replace(&mut self.next, Next::Word) {
            Next::Word => self.command.push(word),
            Next::Output if zones::harmless_device(Path::new(&word)) => {}
            Next::Output => self.script.writes.push(word),
            Next::Input => self.script.reads.push(word),
        }
    }

    fn end_command(&mut self) {
        self.end_word();
        if self.next != Next::Word {
            // A redirection with no target: not a script this reading follows.
            self.script.plain = false;
            self.next = Next::Word;
        }
        if !self.command.is_empty() {
            self.script.commands.push(std::mem::take(&mut self.command));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn read_only(argv: &[String]) -> bool {
        analyse(argv, Path::new("/work"), Some(Path::new("/home/me"))).read_only
    }

    fn shell(script: &str) -> Vec<String> {
        vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()]
    }

    #[test]
    fn reading_commands_are_read_only() {
        for line in [
            "ls -la",
            "cat README.md",
            "head -n 5 src/main.rs",
            "grep -rn TODO src",
            "rg --json foo",
            "find . -name *.rs -type f",
            "wc -l a b",
            "git status",
            "git log --oneline -5",
            "git diff HEAD~1",
            "git -C sub show HEAD",
            "git branch --show-current",
            "sed -n 10,20p file.txt",
            "sed -n /error/p log.txt",
            "env",
            "timeout 5 ls",
            "env LANG=C sort file",
            "uniq file",
        ] {
            assert!(read_only(&words(line)), "{line}");
        }
    }

    #[test]
    fn changing_commands_are_not_read_only() {
        for line in [
            "rm file",
            "touch x",
            "cargo build",
            "find . -delete",
            "find . -name x -exec rm {} ;",
            "git commit -m x",
            "git -c core.pager=evil log",
            "git diff --output=x",
            "git branch new",
            "git tag v1",
            "sed -i s/a/b/ file",
            "sed s/a/b/w out file",
            "sort -o out in",
            "sort --compress-program=gzip in",
            "git grep -O foo",
            "less file",
            "uniq in out",
            "rg --pre ./run foo",
            "env -S ls",
            "bash script.sh",
            "python3 -c print(1)",
            "date -s 2020-01-01",
            "awk {print} file",
            "xargs cat",
        ] {
            assert!(!read_only(&words(line)), "{line}");
        }
    }

    #[test]
    fn shell_scripts_are_read_only_only_when_every_part_is() {
        assert!(read_only(&shell("ls -la && cat a.txt | grep x; wc -l b")));
        assert!(read_only(&shell("cd src && ls 2>/dev/null")));
        assert!(read_only(&shell("grep -r foo . 2>&1 | head")));
        assert!(read_only(&shell("cat 'a file' \"b file\"")));
        assert!(!read_only(&shell("ls > listing.txt")));
        assert!(!read_only(&shell("cat a >> b")));
        assert!(!read_only(&shell("ls && rm -f x")));
        assert!(!read_only(&shell("cat $(find . -name x)")));
        assert!(!read_only(&shell("cat `ls`")));
        assert!(!read_only(&shell("echo $HOME")));
        assert!(!read_only(&shell("sleep 1 & ls")));
        assert!(!read_only(&shell("(cd x; ls)")));
        assert!(!read_only(&shell("cat <<EOF\nx\nEOF")));
        assert!(!read_only(&shell("ls *")));
        assert!(!read_only(&shell("find . -delete")));
        assert!(!read_only(&shell("bash -c 'rm x'")));
        assert!(read_only(&shell("bash -c 'ls'")));
    }

    #[test]
    fn paths_are_collected_and_resolved() {
        let home = Path::new("/home/me");
        let facts = analyse(
            &words("cat ../other/a.txt /etc/hosts ~/notes"),
            Path::new("/work/app"),
            Some(home),
        );
        assert_eq!(
            facts.paths,
            [
                PathBuf::from("/etc/hosts"),
                PathBuf::from("/home/me/notes"),
                PathBuf::from("/work/app"),
                PathBuf::from("/work/other/a.txt"),
            ]
        );
        // `cd` moves the folder later commands run in; redirect targets are paths too.
        let facts = analyse(
            &shell("cd /srv && ls > /tmp/x/out"),
            Path::new("/work/app"),
            Some(home),
        );
        assert!(facts.paths.contains(&PathBuf::from("/srv")));
        assert!(facts.paths.contains(&PathBuf::from("/tmp/x/out")));
        assert!(!facts.read_only);
        // The pattern of grep is not a path; find's expression is not either.
        let facts = analyse(
            &words("grep /etc/x file"),
            Path::new("/work/app"),
            Some(home),
        );
        assert_eq!(facts.paths, [PathBuf::from("/work/app")]);
        let facts = analyse(
            &words("find /srv -path /etc/x"),
            Path::new("/work/app"),
            Some(home),
        );
        assert_eq!(
            facts.paths,
            [PathBuf::from("/srv"), PathBuf::from("/work/app")]
        );
    }

    #[test]
    fn commands_reaching_other_computers_are_seen() {
        let remote = |argv: &[String]| analyse(argv, Path::new("/w"), None).remote;
        for line in [
            "ssh host ls",
            "scp a host:b",
            "curl https://example.com",
            "wget x",
            "nc host 80",
            "rsync -a src host:dst",
            "git push origin main",
            "git fetch",
            "git -C x pull",
            "git clone https://x/y",
            "timeout 5 curl x",
        ] {
            assert!(remote(&words(line)), "{line}");
        }
        assert!(remote(&shell("ls && ssh host")));
        for line in ["rsync -a src/ dst/", "git status", "ls", "git remote -v"] {
            assert!(!remote(&words(line)), "{line}");
        }
    }
}
