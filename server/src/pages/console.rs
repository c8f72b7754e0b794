//! `/computers/{id}/console`: the owner's console on one computer — a terminal and a Code
//! tab, or with `?watch={jobId}` a read-only view of a running job's commands. The page
//! holds no data of the session: `assets/console.js` unlocks with a passkey
//! (`assets/passkeys.js`), opens the channel sealed to the computer's key and draws what
//! the computer answers.

use actix_web::{web, HttpResponse};
use maud::html;
use serde::Deserialize;
use tether_protocol::{DeviceId, JobId};

use super::layout::{error_page, page};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct ConsoleQuery {
    watch: Option<JobId>,
}

pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    device_id: web::Path<DeviceId>,
    query: web::Query<ConsoleQuery>,
) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect(&format!("/computers/{device_id}/console"));
    };
    let device = match crate::devices::get(
        &state.store,
        &caller.account.id,
        &device_id,
        &state.config,
    )
    .await
    {
        Ok(device) if device.revoked_at.is_none() => device,
        Ok(_) => {
            return error_page(&caller, &crate::error::ApiError::not_found("device"));
        }
        Err(error) => return error_page(&caller, &error),
    };
    let watch = query.into_inner().watch;
    let title = match &watch {
        Some(_) => format!("Watch a job on {}", device.name),
        None => format!("Console of {}", device.name),
    };
    page(
        &title,
        Some(&caller),
        html! {
            h1 { (title) }
            div #console data-device=(device.id) data-watch=[watch.as_ref().map(JobId::as_str)] {
                p.muted {
                    "Traffic is sealed for this computer's key: the server passes it on and cannot read it. "
                    "Every command is judged by the computer's own rules and runs confined."
                }
                div.row {
                    p #console-status role="status" aria-live="polite" { "Reading the console's status…" }
                    button #console-unlock type="button" hidden { "Unlock with a passkey" }
                    button #console-connect type="button" hidden { "Connect" }
                    button #console-lock.secondary type="button" hidden { "Lock now" }
                }
                p #console-no-passkey hidden {
                    "Add a passkey on the " a href="/account#passkeys" { "Account page" } " to unlock the console."
                }
                @if watch.is_none() {
                    div role="tablist" aria-label="Console" {
                        button #tab-terminal type="button" role="tab" aria-selected="true"
                            aria-controls="panel-terminal" data-console-tab { "Terminal" }
                        button #tab-code type="button" role="tab" aria-selected="false"
                            aria-controls="panel-code" data-console-tab { "Code" }
                    }
                }
                section #panel-terminal role="tabpanel" aria-labelledby="tab-terminal" {
                    pre #terminal-screen.terminal role="log" tabindex="0" aria-label="Terminal output" {}
                    @if watch.is_none() {
                        div #terminal-confirm.card role="alertdialog" aria-labelledby="terminal-confirm-title" hidden {
                            p #terminal-confirm-title { strong { "This command changes or removes things." } }
                            p #terminal-confirm-reason {}
                            button #terminal-confirm-run type="button" { "Run it" }
                            " "
                            button #terminal-confirm-cancel.secondary type="button" { "Cancel" }
                        }
                        form #terminal-form.row {
                            label { "Folder" select #console-folder {} }
                            label.grow { "Command"
                                input #terminal-line type="text" autocomplete="off" spellcheck="false"
                                    maxlength="4096" disabled;
                            }
                            button type="submit" disabled { "Run" }
                            button #terminal-stop.secondary type="button" disabled
                                title="Stop the command and everything it started (Ctrl-C)" { "Stop (Ctrl-C)" }
                        }
                    } @else {
                        // Watching has nothing to type into; these stay for the script.
                        div hidden {
                            div #terminal-confirm {
                                p #terminal-confirm-reason {}
                                button #terminal-confirm-run type="button" { "Run it" }
                                button #terminal-confirm-cancel type="button" { "Cancel" }
                            }
                            form #terminal-form {
                                select #console-folder aria-label="Folder" {}
                                input #terminal-line type="text" aria-label="Command" disabled;
                                button type="submit" disabled { "Run" }
                                button #terminal-stop type="button" disabled { "Stop" }
                            }
                        }
                    }
                }
                section #panel-code role="tabpanel" aria-labelledby="tab-code" hidden {
                    div.row {
                        label { "Folder" select #code-folder {} }
                        code #code-path {}
                    }
                    div.code-browser {
                        ul #code-listing.plain aria-label="Files" {}
                        div.grow {
                            p { strong #code-file {} }
                            textarea #code-editor.code spellcheck="false" aria-label="File text" rows="24" hidden {}
                            div.row {
                                button #code-save type="button" hidden disabled { "Save" }
                                p #code-note role="status" aria-live="polite" {}
                            }
                        }
                    }
                }
            }
            script src="/assets/passkeys.js" defer {}
            script src="/assets/console.js" defer {}
        },
    )
}
