//! `GET /api/push/key`, `POST|GET /api/push/subscriptions`,
//! `GET|PATCH|DELETE /api/push/subscriptions/{id}`: a signed-in person's browsers, subscribed
//! to Web Push notifications (see `push`); `GET|PATCH /api/push/settings`: what notifications
//! may do.

use actix_web::{web, HttpResponse};
use tether_protocol::push::{
    PushKey, PushSettings, SubscribeParams, Subscribed, Subscription, UpdateSubscriptionParams,
};
use tether_protocol::SubscriptionId;

use super::table::{Access, Table};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::push::settings;
use crate::push::subscriptions::{self, KindsUpdate, NewSubscription, Subscribing};
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/push/key",
            key,
            Access::User,
            "The server's Web Push (VAPID) public key",
        )
        .answer::<PushKey>(200, "The key a browser subscribes with.")
        .errors(&[]);
    table
        .post(
            "/api/push/subscriptions",
            subscribe,
            Access::User,
            "Subscribe a browser to push notifications",
        )
        .body::<SubscribeParams>()
        .answer::<Subscribed>(201, "Subscribed.")
        .answer::<Subscribed>(
            200,
            "This endpoint was subscribed already: updated, same id.",
        )
        .errors(&[400, 409, 413, 415, 422]);
    table
        .get(
            "/api/push/subscriptions",
            list,
            Access::User,
            "The account's push subscriptions",
        )
        .answer_list::<Subscription>(
            200,
            "Newest first; the endpoint's origin only, never its URL or keys.",
        )
        .errors(&[]);
    table
        .get(
            "/api/push/subscriptions/{id}",
            get,
            Access::User,
            "One push subscription",
        )
        .answer::<Subscription>(200, "The subscription.")
        .errors(&[400, 404]);
    table
        .patch(
            "/api/push/subscriptions/{id}",
            update,
            Access::User,
            "Turn kinds of notification on or off",
        )
        .body::<UpdateSubscriptionParams>()
        .answer::<Subscription>(200, "The subscription as it is now.")
        .errors(&[400, 404, 413, 415, 422]);
    table
        .delete(
            "/api/push/subscriptions/{id}",
            delete,
            Access::User,
            "Unsubscribe a browser",
        )
        .empty(204, "Removed: nothing more is sent to it.")
        .errors(&[400, 404]);
    table
        .get(
            "/api/push/settings",
            settings_get,
            Access::User,
            "What notifications may do",
        )
        .answer::<PushSettings>(200, "The account's settings.")
        .errors(&[]);
    table
        .patch(
            "/api/push/settings",
            settings_patch,
            Access::User,
            "Change what notifications may do",
        )
        .body::<PushSettings>()
        .answer::<PushSettings>(200, "The settings as they are now.")
        .errors(&[400, 413, 415, 422]);
}

async fn key(state: web::Data<AppState>, _caller: Caller) -> HttpResponse {
    HttpResponse::Ok().json(PushKey {
        public_key: state.push.public_key().to_owned(),
    })
}

/// 201 for a new subscription; 200 (same id) for an endpoint the account has already.
async fn subscribe(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<SubscribeParams>,
) -> Result<HttpResponse, ApiError> {
    let new = NewSubscription::check(params.into_inner(), state.config.push_allow_loopback)?;
    let (id, subscribing) = subscriptions::subscribe(&state.store, &caller.account.id, new).await?;
    state.notices.push_subscribed(&caller.account.id).await;
    let mut answer = match subscribing {
        Subscribing::Made => HttpResponse::Created(),
        Subscribing::Updated => HttpResponse::Ok(),
    };
    Ok(answer.json(Subscribed { id }))
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let listed = subscriptions::list(&state.store, &caller.account.id).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(listed))
}

async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<SubscriptionId>,
) -> Result<HttpResponse, ApiError> {
    let subscription = subscriptions::get(&state.store, &caller.account.id, &id).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(subscription))
}

async fn update(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<SubscriptionId>,
    params: web::Json<UpdateSubscriptionParams>,
) -> Result<HttpResponse, ApiError> {
    let change = KindsUpdate::from(params.into_inner());
    let subscription = subscriptions::update(&state.store, &caller.account.id, &id, change).await?;
    state.notices.push_subscribed(&caller.account.id).await;
    Ok(HttpResponse::Ok().json(subscription))
}

async fn settings_get(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let settings = settings::get(&state.store, &caller.account.id).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(settings))
}

async fn settings_patch(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<PushSettings>,
) -> Result<HttpResponse, ApiError> {
    let settings = settings::set(&state.store, &caller.account.id, params.into_inner()).await?;
    Ok(HttpResponse::Ok().json(settings))
}

async fn delete(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<SubscriptionId>,
) -> Result<HttpResponse, ApiError> {
    subscriptions::delete(&state.store, &caller.account.id, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}
