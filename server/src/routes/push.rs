//! `GET /api/push/key`, `POST|GET /api/push/subscriptions`,
//! `GET|PATCH|DELETE /api/push/subscriptions/{id}`: a signed-in person's browsers, subscribed
//! to Web Push notifications (see `push`).

use actix_web::{web, HttpResponse};
use tether_protocol::push::{PushKey, SubscribeParams, Subscribed, UpdateSubscriptionParams};
use tether_protocol::SubscriptionId;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::push::subscriptions::{self, KindsUpdate, NewSubscription, Subscribing};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/push/key").route(web::get().to(key)))
        .service(
            web::resource("/api/push/subscriptions")
                .route(web::post().to(subscribe))
                .route(web::get().to(list)),
        )
        .service(
            web::resource("/api/push/subscriptions/{id}")
                .route(web::get().to(get))
                .route(web::patch().to(update))
                .route(web::delete().to(delete)),
        );
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
    Ok(HttpResponse::Ok().json(subscription))
}

async fn delete(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<SubscriptionId>,
) -> Result<HttpResponse, ApiError> {
    subscriptions::delete(&state.store, &caller.account.id, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}
