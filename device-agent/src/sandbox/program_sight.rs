//! What a job's sandbox shows of a recipe's program: found as a run finds it (`PATH`, links
//! resolved, a script's interpreter), and refused at `recipe add` when no job could start it
//! (outside the system folders, this user's toolchain folders and the shared folders, or
//! protected by the guard), instead of the job ending `blocked` later.

use std::path::{Path, PathBuf};

use crate::policy::guard::Guard;
use crate::sandbox::host;

/// Where a recipe's program is, found as a run finds it: a name without `/` on `PATH`, a
/// path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A relative path (`./run.sh`, `tools/x`): looked up in the job's folder when it runs.
    InTheJobsFolder,
    /// The path found, and the same with every link resolved.
    Found { path: PathBuf, real: PathBuf },
    /// No program file by that name (on `PATH`, or at that path).
    Missing,
}

/// Finds `program` as the sandbox's launcher will: a name on `path_var`, else the path.
pub fn locate(program: &str, path_var: Option<&str>) -> Program {
    let found = |path: PathBuf| {
        let real = path.canonicalize().ok().filter(|real| is_program(real))?;
        Some(Program::Found { path, real })
    };
    if program.contains('/') {
        if !program.starts_with('/') {
            return Program::InTheJobsFolder;
        }
        return found(PathBuf::from(program)).unwrap_or(Program::Missing);
    }
    path_var
        .unwrap_or_default()
        .split(':')
        .filter(|entry| entry.starts_with('/'))
        .find_map(|entry| found(Path::new(entry).join(program)))
        .unwrap_or(Program::Missing)
}

fn is_program(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    meta.is_file()
}

/// What a job's sandbox shows a program, for [`check_program`].
#[derive(Debug, Clone, Copy)]
pub struct Sight<'a> {
    /// `PATH`, as the agent passes it to runs.
    pub path_var: Option<&'a str>,
    pub home: Option<&'a Path>,
    /// The shared folders, as configured.
    pub folders: &'a [PathBuf],
    pub guard: &'a Guard,
}

/// Refuses a program a job's sandbox could not start: one nowhere on `PATH`, or one (or its
/// script's interpreter) outside the system folders, this user's toolchain folders and the
/// shared folders, or protected. The sentence names the path and what to do.
///
/// # Errors
/// Why the program would never start, for the owner.
pub fn check_program(program: &str, sight: &Sight<'_>) -> Result<(), String> {
    let (path, real) = match locate(program, sight.path_var) {
        Program::InTheJobsFolder => return Ok(()),
        Program::Missing if program.contains('/') => {
            return Err(format!(
                "{program} is not a program file (missing, or not executable); give the path of an existing program"
            ))
        }
        Program::Missing => {
            return Err(format!(
                "{program} is not on PATH ({}); install it, or give its full path",
                sight.path_var.unwrap_or_default()
            ))
        }
        Program::Found { path, real } => (path, real),
    };
    check_seen(program, &path, &real, sight)?;
    if let Some(interpreter) = interpreter(&real) {
        let Program::Found { path, real } = locate(&interpreter, sight.path_var) else {
            return Err(format!(
                "{} is a script run by {interpreter} (its first line), which is not on this computer; install it, or change that line",
                real.display()
            ));
        };
        check_seen(&interpreter, &path, &real, sight)?;
    }
    Ok(())
}

fn check_seen(program: &str, path: &Path, real: &Path, sight: &Sight<'_>) -> Result<(), String> {
    let mut shown = path.display().to_string();
    if path != real {
        shown.push_str(&format!(" (a link to {})", real.display()));
    }
    if !program.contains('/') {
        shown = format!("{program} is {shown}");
    }
    for candidate in [path, real] {
        if let Err(refusal) = sight.guard.check_access(candidate) {
            return Err(format!(
                "{shown}, which jobs never see: {refusal}. Install it elsewhere"
            ));
        }
    }
    let folders: Vec<PathBuf> = sight
        .folders
        .iter()
        .map(|folder| folder.canonicalize().unwrap_or_else(|_| folder.clone()))
        .collect();
    let seen = |candidate: &Path| host::sees(candidate, sight.home, sight.path_var, &folders);
    if !seen(path) || !seen(real) {
        return Err(format!(
            "{shown}, which a job's sandbox cannot see: jobs see the system folders (/usr, /bin, /opt, …), your toolchain folders (~/.cargo, ~/.local/bin, … and the PATH entries in your home folder) and the folders you share. Move it into a shared folder (a job there runs it as ./PATH), or install it system-wide (for example in /usr/local/bin)"
        ));
    }
    Ok(())
}

/// A script's interpreter: `#!/bin/sh` gives `/bin/sh`, `#!/usr/bin/env python3` gives
/// `python3` (looked up on `PATH`, as `env` does).
fn interpreter(script: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let read = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = line.split(|&byte| byte == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if Path::new(first)
        .file_name()
        .is_some_and(|name| name == "env")
    {
        let command = words.find(|word| !word.starts_with('-') && !word.contains('='));
        return command
            .map(str::to_owned)
            .or_else(|| Some(first.to_owned()));
    }
    Some(first.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(path: &Path, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
    }

    #[test]
    fn a_program_the_sandbox_cannot_see_is_refused_naming_it() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().canonicalize()?;
        let home = root.join("home");
        for dir in ["bin", ".cargo/bin", "work/tools", "apps", ".agent"] {
            std::fs::create_dir_all(home.join(dir))?;
        }
        // `~/bin` is on PATH but holds only a link to a program outside every visible folder.
        program(&home.join("apps/build"), "#!/bin/sh\necho built\n")?;
        std::os::unix::fs::symlink(home.join("apps/build"), home.join("bin/build"))?;
        program(&home.join("work/tools/check"), "#!/bin/sh\necho ok\n")?;
        program(
            &home.join("work/tools/py"),
            "#!/usr/bin/env tether-no-such-python\n",
        )?;
        program(&home.join("work/tools/odd"), "#!/bin/sh\n")?;
        program(&home.join(".cargo/bin/cargo"), "#!/bin/sh\n")?;
        program(&home.join(".agent/tool"), "#!/bin/sh\n")?;
        std::fs::write(home.join("work/tools/plain"), "not executable")?;
        let path_var = format!(
            "/usr/bin:/bin:{}:{}",
            home.join("bin").display(),
            home.join(".cargo/bin").display()
        );
        let guard = Guard::new(Some(home.clone()), &home.join(".agent"));
        let folders = [home.join("work")];
        let sight = Sight {
            path_var: Some(&path_var),
            home: Some(&home),
            folders: &folders,
            guard: &guard,
        };
        let check = |program: &str| check_program(program, &sight);
        let refused = |program: &str| check(program).err().unwrap_or_default();
        assert_eq!(check("sh"), Ok(()));
        assert_eq!(check("cargo"), Ok(()));
        assert_eq!(check("./tools/check"), Ok(()));
        assert_eq!(
            check(&home.join("work/tools/check").display().to_string()),
            Ok(())
        );
        let linked = refused("build");
        assert!(
            linked.starts_with(&format!(
                "build is {} (a link to {}), which a job's sandbox cannot see",
                home.join("bin/build").display(),
                home.join("apps/build").display()
            )) && linked.contains("Move it into a shared folder")
                && linked.contains("install it system-wide"),
            "{linked}"
        );
        let outside = refused(&home.join("apps/build").display().to_string());
        assert!(outside.contains("cannot see"), "{outside}");
        let missing = refused("tether-no-such-program");
        assert!(
            missing.starts_with("tether-no-such-program is not on PATH ("),
            "{missing}"
        );
        let plain = refused(&home.join("work/tools/plain").display().to_string());
        assert!(plain.contains("not a program file"), "{plain}");
        let python = refused(&home.join("work/tools/py").display().to_string());
        assert!(
            python.contains("a script run by tether-no-such-python"),
            "{python}"
        );
        assert_eq!(
            check(&home.join("work/tools/odd").display().to_string()),
            Ok(())
        );
        let protected = refused(&home.join(".agent/tool").display().to_string());
        assert!(protected.contains("which jobs never see"), "{protected}");
        Ok(())
    }

    #[test]
    fn interpreters_are_read_from_the_first_line() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let script = tmp.path().join("s");
        for (text, expected) in [
            ("#!/bin/sh\necho\n", Some("/bin/sh")),
            ("#! /usr/bin/python3 -u\n", Some("/usr/bin/python3")),
            ("#!/usr/bin/env -S node --flag\n", Some("node")),
            ("#!/usr/bin/env PYTHONX=1 python3\n", Some("python3")),
            ("echo no\n", None),
        ] {
            std::fs::write(&script, text)?;
            assert_eq!(interpreter(&script).as_deref(), expected, "{text}");
        }
        Ok(())
    }
}
