//! `tether-agent explain`: a dry run of the policy. It builds the same [`RunPolicy`] a run
//! would get and calls the same [`RunPolicy::judge`] the gate calls, so what it prints and
//! what a run meets cannot disagree.

use std::path::PathBuf;

use serde::Serialize;
use tether_protocol::capabilities::SandboxStrength;
use tether_protocol::decisions::Answer;
use tether_protocol::jobs::Mode;

use crate::policy::guard::Guard;
use crate::policy::{zones, Action, Judgement, RunPolicy, RunSettings, Verdict};

/// What to explain: a run's situation and one action.
#[derive(Debug, Clone)]
pub struct Situation {
    pub mode: Mode,
    /// The run's folder.
    pub folder: PathBuf,
    /// The job's network choice.
    pub network: bool,
    /// The owner's trusted folders (plus the folder itself with `--trusted`).
    pub trusted: Vec<PathBuf>,
    pub sandbox: SandboxStrength,
    pub guard: Guard,
}

/// The printed (and `--json`) answer: the verdict and the rule that decides. An output of
/// the command line, hence `Serialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `allow`, `ask` or `refuse`.
    pub verdict: &'static str,
    /// For `ask`: what unattended mode would take.
    pub recommended: Option<Answer>,
    /// The rule that decides.
    pub rule: String,
    pub reason: String,
    /// The decision's kind, were it asked.
    pub kind: &'static str,
    pub question: String,
    /// What "allow for this run" would add, in words.
    pub run_rule: Option<String>,
    /// Unattended mode took the recommended answer.
    pub unattended: bool,
    pub mode: Mode,
    pub folder: PathBuf,
    /// The action as judged (paths resolved) and its hash.
    pub action: serde_json::Value,
    pub action_hash: String,
}

/// Judges `action` in `situation` with the gate's own policy.
pub fn explain(situation: Situation, action: &Action) -> Explanation {
    let policy = RunPolicy::new(settings(situation));
    let action = policy.normalize(action);
    let judgement = policy.judge(&action);
    describe(&policy, &action, &judgement)
}

/// The settings a run in `situation` gets (this computer's temporary folders).
pub fn settings(situation: Situation) -> RunSettings {
    RunSettings {
        mode: situation.mode,
        folder: situation.folder,
        trusted: situation.trusted,
        network: situation.network,
        sandbox: situation.sandbox,
        guard: situation.guard,
        temporary: zones::temporary_folders(),
        delivery: None,
    }
}

fn describe(policy: &RunPolicy, action: &Action, judgement: &Judgement) -> Explanation {
    let (verdict, recommended) = match &judgement.verdict {
        Verdict::Allow => ("allow", None),
        Verdict::Ask { recommended } => ("ask", Some(*recommended)),
        Verdict::Refuse { .. } => ("refuse", None),
    };
    Explanation {
        verdict,
        recommended,
        rule: judgement.rule.clone(),
        reason: judgement.reason.clone(),
        kind: judgement.kind,
        question: judgement.question.clone(),
        run_rule: judgement.grant.as_ref().map(|grant| grant.describe()),
        unattended: judgement.unattended,
        mode: policy.mode(),
        folder: policy.folder().to_path_buf(),
        action: action.canonical(),
        action_hash: action.hash(),
    }
}

/// The explanation as text.
pub fn render(explanation: &Explanation) -> String {
    let mut text = String::new();
    let verdict = match (explanation.verdict, explanation.recommended) {
        ("ask", Some(Answer::Allow)) => "ASK (recommended: allow)".to_owned(),
        ("ask", Some(Answer::Deny)) => "ASK (recommended: deny)".to_owned(),
        (verdict, _) => verdict.to_ascii_uppercase(),
    };
    text.push_str(&format!("{verdict}\n"));
    text.push_str(&format!("  rule:     {}\n", explanation.rule));
    text.push_str(&format!("  why:      {}\n", explanation.reason));
    if explanation.unattended {
        text.push_str("  (unattended mode asks nobody: it takes the recommended answer)\n");
    }
    if explanation.verdict == "ask" {
        text.push_str(&format!("  question: {}\n", explanation.question));
        if let Some(run_rule) = &explanation.run_rule {
            text.push_str(&format!(
                "  \"allow for this run\" would allow {run_rule}\n"
            ));
        }
    }
    text.push_str(&format!(
        "  mode {}, folder {}\n",
        explanation.mode.as_str(),
        explanation.folder.display()
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::gate::{Gate, Passage};

    #[test]
    fn explain_prints_what_the_policy_judged() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().canonicalize()?.join("home");
        std::fs::create_dir_all(home.join("work"))?;
        let situation = Situation {
            mode: Mode::Ask,
            folder: home.join("work"),
            network: false,
            trusted: Vec::new(),
            sandbox: SandboxStrength::Strong,
            guard: Guard::new(Some(home.clone()), &home.join(".local/share/tether-agent")),
        };
        let action = Action::Command {
            argv: vec!["cargo".into(), "test".into()],
            cwd: PathBuf::from("."),
        };
        let explanation = explain(situation, &action);
        assert_eq!(explanation.verdict, "ask");
        assert_eq!(explanation.rule, "ask-mode-command");
        assert_eq!(explanation.recommended, Some(Answer::Allow));
        assert_eq!(
            explanation.action["cwd"],
            home.join("work").display().to_string()
        );
        let text = render(&explanation);
        assert!(
            text.starts_with("ASK (recommended: allow)\n  rule:     ask-mode-command\n"),
            "{text}"
        );
        assert!(text.contains("question: Run `cargo test` in"), "{text}");
        let json = serde_json::to_value(&explanation)?;
        assert_eq!(json["verdict"], "ask");
        assert_eq!(json["actionHash"], action_hash_of(&home, &action));
        Ok(())
    }

    /// For every mode and kind of action, `explain` says what the gate does.
    #[tokio::test]
    async fn explain_says_what_the_gate_does() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().canonicalize()?.join("home");
        for dir in ["work", "notes", ".ssh"] {
            std::fs::create_dir_all(home.join(dir))?;
        }
        let situation = |mode| Situation {
            mode,
            folder: home.join("work"),
            network: true,
            trusted: Vec::new(),
            sandbox: SandboxStrength::Strong,
            guard: Guard::new(Some(home.clone()), &home.join(".local/share/tether-agent")),
        };
        let run = |argv: &[&str]| Action::Command {
            argv: argv.iter().map(|word| (*word).to_owned()).collect(),
            cwd: PathBuf::from("."),
        };
        let actions = [
            run(&["cargo", "test"]),
            run(&["ls", "-la"]),
            run(&["sudo", "ls"]),
            run(&["git", "push"]),
            run(&["cp", "a", "../notes/b"]),
            Action::ReadFile {
                path: home.join(".ssh/id_ed25519"),
            },
            Action::ReadFile {
                path: home.join("notes/a.md"),
            },
            Action::WriteFile {
                path: home.join("work/a.rs"),
            },
            Action::WriteFile {
                path: home.join("notes/a.md"),
            },
            Action::WriteFile {
                path: PathBuf::from("/etc/hosts"),
            },
            Action::Network {
                target: "example.com".into(),
            },
            Action::Tool {
                kind: "other".into(),
                title: "x".into(),
            },
        ];
        for mode in Mode::ALL {
            for action in &actions {
                let explanation = explain(situation(mode), action);
                let gate = Gate::new(RunPolicy::new(settings(situation(mode))), None);
                let passage = gate.check(action.clone()).await;
                let agrees = match (&passage, explanation.verdict) {
                    (Passage::Allowed { .. }, "allow") => true,
                    (Passage::Refused { reason }, "refuse") => {
                        reason.contains(&format!("(rule {})", explanation.rule))
                    }
                    // With nobody to ask, the gate refuses what asks.
                    (Passage::Refused { reason }, "ask") => {
                        reason.starts_with("nobody can be asked")
                    }
                    _ => false,
                };
                assert!(
                    agrees,
                    "{mode:?} {action:?}: {explanation:?} vs {passage:?}"
                );
            }
        }
        Ok(())
    }

    fn action_hash_of(home: &std::path::Path, action: &Action) -> String {
        match action {
            Action::Command { argv, .. } => Action::Command {
                argv: argv.clone(),
                cwd: home.join("work"),
            }
            .hash(),
            other => other.hash(),
        }
    }
}
