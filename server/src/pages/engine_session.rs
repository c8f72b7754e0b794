//! A stopped coding-agent job's "Delete agent session" on its page (`assets/results.js`):
//! its computer keeps the agent's conversation so a follow-up can carry it on, and the
//! owner may have it deleted there (`DELETE /api/jobs/{id}/session`). Shown only to the
//! computer's owner (whose account the page found the computer in), once the job stopped,
//! for an engine its computer publishes as an ACP agent.

use maud::{html, Markup};
use tether_protocol::capabilities::EngineKind;
use tether_protocol::devices::Device;
use tether_protocol::jobs::Job;

/// The section, when the job's agent session may be deleted from here.
pub(super) fn session_section(
    job: &Job,
    device: Option<&Device>,
    engine_kind: Option<EngineKind>,
) -> Markup {
    let paired = device.is_some_and(|device| device.revoked_at.is_none());
    let shown = job.state.is_final() && paired && engine_kind == Some(EngineKind::Acp);
    html! {
        @if shown {
            section.agent-session #agent-session aria-labelledby="session-heading"
                data-session-url={ "/api/jobs/" (job.id) "/session" } {
                h2 #session-heading { "Agent session" }
                p.muted { "Its computer keeps the agent's conversation so a follow-up can carry it on. Once deleted there, a follow-up starts a new session, told only what this job was asked and how it ended." }
                button.danger type="button" data-session-delete
                    data-confirm="Delete this job's agent session on its computer?" { "Delete agent session" }
                p.session-status role="status" {}
            }
        }
    }
}
