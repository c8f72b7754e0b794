//! What a screenshot may show: a page served on this computer's loopback, or a file of the
//! run's own folder. Everything else is refused with a sentence, before a browser starts.
//!
//! - A `url` is `http` or `https` to `127.0.0.0/8`, `::1`, `localhost` or a name under
//!   `.localhost` (which browsers resolve to loopback themselves): the dev server the run
//!   started, never a site on the internet or the local network.
//! - A `path` is resolved (links and `..` followed) and must still be inside the run's
//!   folder: a link leading out of it is refused, not followed.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use reqwest::Url;

/// What to take a picture of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A page on this computer's loopback.
    Url(String),
    /// A file in the run's folder (relative to it, or absolute inside it).
    Path(PathBuf),
}

/// The address the browser opens for `target`, once it is allowed.
///
/// # Errors
/// A sentence saying why the target is refused.
pub fn resolve(target: &Target, run_folder: &Path) -> Result<String, String> {
    match target {
        Target::Url(url) => loopback_url(url),
        Target::Path(path) => file_url(path, run_folder),
    }
}

/// `url` when it is http(s) to this computer's loopback.
fn loopback_url(url: &str) -> Result<String, String> {
    let parsed = Url::parse(url.trim()).map_err(|err| format!("{url:?} is not a URL: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{url:?} is not an http or https address; open a file of the run's folder with `path`"
        ));
    }
    let host = parsed.host_str().unwrap_or_default();
    let loopback = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    };
    if !loopback {
        return Err(format!(
            "{url:?} is not on this computer's loopback; a screenshot shows only pages served on 127.0.0.1, ::1 or localhost (such as the dev server the run started)"
        ));
    }
    Ok(parsed.to_string())
}

/// The `file://` address of `path`, when it is a file inside `run_folder`.
fn file_url(path: &Path, run_folder: &Path) -> Result<String, String> {
    let folder = run_folder
        .canonicalize()
        .map_err(|err| format!("the run's folder cannot be read: {err}"))?;
    let joined = folder.join(path);
    let real = joined
        .canonicalize()
        .map_err(|_| format!("{} does not exist in the run's folder", path.display()))?;
    if !real.starts_with(&folder) {
        return Err(format!(
            "{} leads out of the run's folder; only its own files can be opened",
            path.display()
        ));
    }
    if !real.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    Url::from_file_path(&real)
        .map(String::from)
        .map_err(|()| format!("{} cannot be opened as a file address", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Result<String, String> {
        resolve(&Target::Url(text.to_owned()), Path::new("/"))
    }

    #[test]
    fn only_loopback_pages_are_allowed() {
        for allowed in [
            "http://127.0.0.1:5173/",
            "http://127.8.9.10/x?y=1",
            "https://localhost:8443/app",
            "http://LOCALHOST./",
            "http://shop.localhost:3000/",
            "http://[::1]:8080/",
        ] {
            assert!(url(allowed).is_ok(), "{allowed}: {:?}", url(allowed));
        }
        for (refused, why) in [
            ("http://example.com/", "not on this computer's loopback"),
            (
                "http://192.168.1.10:3000/",
                "not on this computer's loopback",
            ),
            ("http://10.0.0.1/", "not on this computer's loopback"),
            ("http://0.0.0.0:3000/", "not on this computer's loopback"),
            (
                "http://localhost.example.com/",
                "not on this computer's loopback",
            ),
            (
                "http://[::ffff:127.0.0.1]/",
                "not on this computer's loopback",
            ),
            ("ftp://127.0.0.1/", "not an http or https address"),
            ("file:///etc/passwd", "not an http or https address"),
            ("javascript:alert(1)", "not an http or https address"),
            ("localhost:3000", "not an http or https address"),
            ("127.0.0.1:3000", "is not a URL"),
            ("not a url", "is not a URL"),
        ] {
            let answer = url(refused);
            assert!(
                matches!(&answer, Err(sentence) if sentence.contains(why)),
                "{refused}: {answer:?}"
            );
        }
    }

    #[test]
    fn a_path_must_stay_inside_the_run_folder() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp
            .path()
            .canonicalize()
            .unwrap_or_else(|err| panic!("{err}"));
        let run = root.join("run");
        std::fs::create_dir_all(run.join("dist")).unwrap_or_else(|err| panic!("{err}"));
        std::fs::write(run.join("dist/index.html"), "<p>hi</p>").unwrap_or_default();
        std::fs::write(root.join("secret.html"), "secret").unwrap_or_default();
        #[cfg(unix)]
        std::os::unix::fs::symlink(root.join("secret.html"), run.join("out.html"))
            .unwrap_or_default();
        let path = |p: &str| resolve(&Target::Path(PathBuf::from(p)), &run);
        assert_eq!(
            path("dist/index.html"),
            Ok(format!("file://{}", run.join("dist/index.html").display()))
        );
        assert!(path(&run.join("dist/../dist/index.html").display().to_string()).is_ok());
        for (refused, why) in [
            ("../secret.html", "leads out of the run's folder"),
            ("/etc/passwd", "leads out of the run's folder"),
            ("missing.html", "does not exist"),
            ("dist", "is not a file"),
        ] {
            let answer = path(refused);
            assert!(
                matches!(&answer, Err(sentence) if sentence.contains(why)),
                "{refused}: {answer:?}"
            );
        }
        #[cfg(unix)]
        assert!(
            matches!(path("out.html"), Err(sentence) if sentence.contains("leads out")),
            "a link out is refused"
        );
    }
}
