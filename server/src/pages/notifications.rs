//! `/account/notifications`: turn Web Push on for this device, and the devices that get it,
//! each with its kinds and Remove (docs/NOTIFICATIONS.md).
//!
//! The list is rendered here from `push::subscriptions`; `assets/notifications.js` does what
//! needs the browser: the permission, `pushManager.subscribe` with the server's key, the
//! `POST`, the kinds' `PATCH`. Remove is a `data-api` form like every other.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use tether_protocol::push::{Kinds, PushSettings, Subscription};

use super::layout::{error_page, page, when};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::push::{settings, subscriptions};
use crate::state::AppState;

pub async fn show(state: web::Data<AppState>, caller: Option<Caller>) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/account/notifications");
    };
    let listed = subscriptions::list(&state.store, &caller.account.id).await;
    let settings = settings::get(&state.store, &caller.account.id).await;
    let (listed, settings) = match (listed, settings) {
        (Ok(listed), Ok(settings)) => (listed, settings),
        (Err(error), _) | (_, Err(error)) => return error_page(&caller, &error),
    };
    let now = state.store.clock().now();
    let body = html! {
        h1 { "Notifications" }
        p {
            "Tether can tell your phone, or any browser, when a run asks you something, when a \
             job ends and when a computer goes offline with work running. A notification names \
             only the question or the job and the computer, never a prompt, a secret or output."
        }
        (this_device())
        section.card #push-devices aria-labelledby="push-devices-title" {
            h2 #push-devices-title { "Devices that get notifications" }
            @if listed.is_empty() {
                p.muted { "None yet." }
            } @else {
                ul.subscriptions {
                    @for subscription in &listed { (subscription_item(subscription, now)) }
                }
            }
        }
        (answers_section(settings))
        script src="/assets/notifications.js" defer {}
    };
    page("Notifications", Some(&caller), body)
}

/// What a question's notification may answer: Deny always, Allow only when turned on here.
fn answers_section(settings: PushSettings) -> Markup {
    html! {
        section.card #push-answers aria-labelledby="push-answers-title" {
            h2 #push-answers-title { "Answering from a notification" }
            p {
                "A question's notification has Deny and Allow. Deny answers at once, even from \
                 the lock screen. Allow opens the question first, so you see the exact action \
                 before it runs."
            }
            label.inline {
                input type="checkbox" data-push-setting="allowFromNotifications"
                    checked[settings.allow_from_notifications];
                "Allow from notifications: let Allow answer without opening the question"
            }
            p.error role="alert" {}
        }
    }
}

/// The form for this browser; the script shows it once it knows the browser can take push.
fn this_device() -> Markup {
    html! {
        section.card #push-this-device aria-labelledby="push-this-title" {
            h2 #push-this-title { "This device" }
            p #push-status role="status" { "Turning notifications on needs JavaScript." }
            form.stack #push-enable hidden {
                label { "Name for this device"
                    input #push-name type="text" name="name" maxlength="100" autocomplete="off" required;
                }
                p.error role="alert" {}
                button type="submit" { "Turn on notifications on this device" }
            }
        }
    }
}

fn subscription_item(subscription: &Subscription, now: DateTime<Utc>) -> Markup {
    let name = subscription.name.as_deref().unwrap_or("Unnamed device");
    let id = subscription.id.to_string();
    html! {
        li.card.subscription data-subscription=(id) {
            div.row {
                strong { (name) }
                span.badge.this-device hidden { "this device" }
            }
            div.muted { "Through " (subscription.origin) " · added " (when(subscription.created_at, now)) }
            div.muted {
                "Last delivered: "
                @match subscription.last_success_at { Some(at) => (when(at, now)), None => "not yet" }
            }
            (kind_toggles(&id, subscription.kinds))
            form data-api={ "/api/push/subscriptions/" (id) } data-method="DELETE"
                data-confirm={ "Stop notifications on " (name) "?" } {
                button.danger type="submit" { "Remove" }
                span.error {}
            }
        }
    }
}

/// One checkbox per message kind; the script sends each change as it is made.
fn kind_toggles(id: &str, kinds: Kinds) -> Markup {
    let toggles = [
        ("decision", "Questions a run asks", kinds.decision),
        ("job_ended", "Jobs that ended", kinds.job_ended),
        (
            "device_offline",
            "A computer offline with work running",
            kinds.device_offline,
        ),
    ];
    html! {
        fieldset.kinds {
            legend { "Tell it about" }
            @for (kind, text, on) in toggles {
                label.inline {
                    input type="checkbox" data-subscription=(id) data-kind=(kind) checked[on];
                    (text)
                }
            }
            p.error role="alert" {}
        }
    }
}
