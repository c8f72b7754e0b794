//! The gate every action an engine asks for goes through: the run's [`RunPolicy`] judges it,
//! and when the verdict is "ask" the run's [`Ask`] asks the owner and waits.
//!
//! Recipes do not pass through here: a recipe is a command the owner configured on this
//! computer, so starting it is checked by the hard floor and the guard only (by the recipe
//! engine). The gate is for what engines ask at run time: tool calls, terminals, file writes.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use tether_protocol::decisions::{Answer, Scope};

use crate::policy::asking::{Ask, Outcome, Question};
use crate::policy::{Action, Judgement, Rule, RunPolicy, Verdict};

/// Whether an action may go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Passage {
    /// Go ahead; `note` says why when someone (or a rule of this run) decided.
    Allowed { note: Option<String> },
    /// Do not; `reason` is what the engine (and the result) is told.
    Refused { reason: String },
}

/// How the reason of a refusal the owner answered begins (and no other reason does).
pub const OWNER_DENIED: &str = "the owner denied it";

/// The policy of one run plus the way to ask its owner.
#[derive(Debug)]
pub struct Gate {
    policy: RunPolicy,
    /// `None` where nobody can be asked (dry runs, tests): an "ask" is then refused.
    asker: Option<Box<dyn Ask>>,
    /// What `unattended` mode took instead of asking, for the result. A std mutex: held
    /// only to push or copy.
    unattended: Mutex<Vec<String>>,
}

impl Gate {
    pub fn new(policy: RunPolicy, asker: Option<Box<dyn Ask>>) -> Gate {
        Gate {
            policy,
            asker,
            unattended: Mutex::new(Vec::new()),
        }
    }

    pub fn policy(&self) -> &RunPolicy {
        &self.policy
    }

    /// Judges `action` and, when the policy says so, asks the owner and waits. Only an
    /// answer allows what asks: a timeout, a stop or an error refuses.
    pub async fn check(&self, action: Action) -> Passage {
        self.check_previewed(action, std::future::ready(None)).await
    }

    /// [`Gate::check`], showing the owner `preview` (a write's proposed change) when asked.
    /// The future runs only if the verdict is "ask", so an allowed write reads nothing.
    pub async fn check_previewed(
        &self,
        action: Action,
        preview: impl Future<Output = Option<String>>,
    ) -> Passage {
        let action = self.policy.normalize(&action);
        let judgement = self.policy.judge(&action);
        match &judgement.verdict {
            Verdict::Allow => self.allowed(&judgement),
            Verdict::Refuse { reason } => {
                if judgement.unattended {
                    self.record(format!(
                        "denied without asking: {} ({})",
                        judgement.question, judgement.reason
                    ));
                }
                tracing::info!(rule = judgement.rule, "refused: {reason}");
                Passage::Refused {
                    reason: format!("{reason} (rule {})", judgement.rule),
                }
            }
            Verdict::Ask { .. } => self.ask(&action, judgement, preview.await).await,
        }
    }

    /// What `unattended` mode took instead of asking, in order, for the run's result.
    pub fn unattended_choices(&self) -> Vec<String> {
        self.unattended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn allowed(&self, judgement: &Judgement) -> Passage {
        if judgement.unattended {
            // Once for a folder is enough: the rest of the run works there freely.
            self.policy.add_run_rule(judgement);
            let choice = format!(
                "allowed without asking: {} ({})",
                judgement.question, judgement.reason
            );
            self.record(choice.clone());
            return Passage::Allowed { note: Some(choice) };
        }
        let note = (judgement.rule == Rule::RunRule.name()).then(|| judgement.reason.clone());
        Passage::Allowed { note }
    }

    async fn ask(&self, action: &Action, judgement: Judgement, preview: Option<String>) -> Passage {
        let Some(asker) = &self.asker else {
            return Passage::Refused {
                reason: format!("nobody can be asked here: {}", judgement.question),
            };
        };
        let question = Question {
            kind: judgement.kind.to_owned(),
            question: judgement.question.clone(),
            action: action.canonical(),
            action_hash: action.hash(),
            preview,
        };
        match asker.ask(&question).await {
            Outcome::Answered {
                answer: Answer::Allow,
                scope,
                on,
            } => {
                // An answer lives as long as the run (and the runs that continue it): it
                // never becomes local trust.
                if scope == Scope::Session {
                    self.policy.add_answered_rule(&judgement);
                }
                let reach = match scope {
                    Scope::Once => "once",
                    Scope::Session => "for this run",
                };
                Passage::Allowed {
                    note: Some(format!("allowed {reach} {}", on.describe())),
                }
            }
            Outcome::Answered {
                answer: Answer::Deny,
                on,
                ..
            } => Passage::Refused {
                reason: format!("{OWNER_DENIED} {}: {}", on.describe(), judgement.question),
            },
            Outcome::Expired => Passage::Refused {
                reason: format!(
                    "nobody answered in time, so it was not done: {}",
                    judgement.question
                ),
            },
            Outcome::Withdrawn(why) => Passage::Refused {
                reason: format!("the run is stopping ({why}), so it was not done"),
            },
            Outcome::Unasked(why) => Passage::Refused {
                reason: format!("the owner could not be asked ({why}), so it was not done"),
            },
        }
    }

    fn record(&self, choice: String) {
        tracing::info!("{choice}");
        self.unattended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(choice);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tether_protocol::capabilities::SandboxStrength;
    use tether_protocol::jobs::Mode;

    use super::*;
    use crate::policy::guard::Guard;
    use crate::policy::RunSettings;

    struct Fixture {
        _tmp: tempfile::TempDir,
        home: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let home = tmp.path().canonicalize().unwrap_or_default().join("home");
        for dir in ["work", "notes", ".ssh"] {
            std::fs::create_dir_all(home.join(dir)).unwrap_or_else(|err| panic!("{err}"));
        }
        Fixture { _tmp: tmp, home }
    }

    fn gate(fx: &Fixture, mode: Mode) -> Gate {
        let settings = RunSettings {
            mode,
            folder: fx.home.join("work"),
            trusted: Vec::new(),
            network: false,
            sandbox: SandboxStrength::Strong,
            guard: Guard::new(
                Some(fx.home.clone()),
                &fx.home.join(".local/share/tether-agent"),
            ),
            temporary: Vec::new(),
            delivery: None,
        };
        Gate::new(RunPolicy::new(settings), None)
    }

    fn write(path: PathBuf) -> Action {
        Action::WriteFile { path }
    }

    /// Answers every question allow, for `scope`.
    #[derive(Debug)]
    struct Allowing(Scope);

    impl Ask for Allowing {
        fn ask<'a>(
            &'a self,
            _question: &'a Question,
        ) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
            Box::pin(std::future::ready(Outcome::Answered {
                answer: Answer::Allow,
                scope: self.0,
                on: crate::policy::asking::AnsweredOn::Web,
            }))
        }
    }

    #[tokio::test]
    async fn only_a_folder_answered_for_the_run_reaches_its_commands() {
        let fx = fixture();
        let notes = fx.home.join("notes");
        let once = Gate::new(
            gate(&fx, Mode::Review).policy,
            Some(Box::new(Allowing(Scope::Once))),
        );
        let allowed = once.check(write(notes.join("a.md"))).await;
        assert!(matches!(allowed, Passage::Allowed { .. }), "{allowed:?}");
        assert!(once.policy().granted_folders().is_empty());
        let for_run = Gate::new(
            gate(&fx, Mode::Review).policy,
            Some(Box::new(Allowing(Scope::Session))),
        );
        let allowed = for_run.check(write(notes.join("a.md"))).await;
        assert!(matches!(allowed, Passage::Allowed { .. }), "{allowed:?}");
        assert_eq!(for_run.policy().granted_folders(), vec![notes.clone()]);
        // What unattended mode took by itself lets the agent's own writes through, never
        // its commands' sandbox.
        let unattended = gate(&fx, Mode::Unattended);
        let allowed = unattended.check(write(notes.join("a.md"))).await;
        assert!(matches!(allowed, Passage::Allowed { .. }), "{allowed:?}");
        assert!(unattended.policy().granted_folders().is_empty());
    }

    #[tokio::test]
    async fn a_run_that_continues_another_starts_with_its_folders() {
        let fx = fixture();
        let gate = gate(&fx, Mode::Review);
        let notes = fx.home.join("notes");
        let taken = gate.policy().inherit_folders(&[
            notes.clone(),
            // Protected, gone, the run's own folder, or not canonical: left out.
            fx.home.join(".ssh"),
            fx.home.join("gone"),
            fx.home.join("work"),
            fx.home.join("notes/../notes"),
        ]);
        assert_eq!(taken, vec![notes.clone()]);
        assert_eq!(gate.policy().granted_folders(), vec![notes.clone()]);
        // Nobody can be asked here: the write goes ahead only because the folder is granted.
        let allowed = gate.check(write(notes.join("b.md"))).await;
        assert!(matches!(allowed, Passage::Allowed { .. }), "{allowed:?}");
        let elsewhere = gate.check(write(fx.home.join("other/c.md"))).await;
        assert!(
            matches!(elsewhere, Passage::Refused { .. }),
            "{elsewhere:?}"
        );
    }

    #[tokio::test]
    async fn unattended_takes_the_recommended_answer_and_lists_it() {
        let fx = fixture();
        let gate = gate(&fx, Mode::Unattended);
        let own = gate.check(write(fx.home.join("notes/a.md"))).await;
        assert!(matches!(own, Passage::Allowed { note: Some(_) }), "{own:?}");
        // The folder is now a rule of the run: no second choice is recorded for it.
        let again = gate.check(write(fx.home.join("notes/b.md"))).await;
        assert!(matches!(again, Passage::Allowed { .. }), "{again:?}");
        let foreign = gate.check(write(PathBuf::from("/srv/tether-test/x"))).await;
        assert!(matches!(foreign, Passage::Refused { .. }), "{foreign:?}");
        let inside = gate.check(write(PathBuf::from("src/lib.rs"))).await;
        assert_eq!(inside, Passage::Allowed { note: None });
        let choices = gate.unattended_choices();
        assert_eq!(choices.len(), 2, "{choices:?}");
        assert!(
            choices[0].starts_with("allowed without asking"),
            "{choices:?}"
        );
        assert!(
            choices[1].starts_with("denied without asking"),
            "{choices:?}"
        );
    }

    #[tokio::test]
    async fn with_nobody_to_ask_an_ask_is_refused_and_refusals_name_their_rule() {
        let fx = fixture();
        let gate = gate(&fx, Mode::Ask);
        let asked = gate.check(write(PathBuf::from("src/lib.rs"))).await;
        assert!(
            matches!(&asked, Passage::Refused { reason } if reason.starts_with("nobody can be asked")),
            "{asked:?}"
        );
        let floor = gate
            .check(Action::Command {
                argv: vec!["sudo".into(), "ls".into()],
                cwd: PathBuf::from("."),
            })
            .await;
        assert!(
            matches!(&floor, Passage::Refused { reason } if reason.contains("hard-floor:privilege")),
            "{floor:?}"
        );
        let keys = gate
            .check(Action::ReadFile {
                path: fx.home.join(".ssh/id_ed25519"),
            })
            .await;
        assert!(
            matches!(&keys, Passage::Refused { reason } if reason.contains("rule guard")),
            "{keys:?}"
        );
        assert!(gate.unattended_choices().is_empty());
    }
}
