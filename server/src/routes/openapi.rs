//! The OpenAPI 3.1 document of everything the server answers, `GET /api/openapi.json`.
//!
//! Schemas come from `tether-protocol`'s wire types (`utoipa::ToSchema`), so a field added to
//! the protocol shows up here without another edit. The operations are listed below, one
//! line of builder calls each: method, path, who may call it, body, answers and the error
//! statuses it can give. `tests/api/openapi.rs` checks that every route the server registers
//! is listed, and `scripts/fuzz-api` runs schemathesis against the document.

use std::sync::OnceLock;

use actix_web::{web, HttpResponse};

use tether_protocol::auth::{
    ApiToken, CreatedToken, LoginParams, LoginResponse, Me, NewTokenParams, SignupParams,
};
use tether_protocol::decisions::{
    AnswerRequest, AskRequest, AskResponse, CloseRequest, Decision, DeviceDecision,
};
use tether_protocol::devices::{
    AdminDevice, Device, DeviceSelf, HeartbeatParams, HeartbeatResponse, RenameParams,
};
use tether_protocol::files::{FileAnswer, FileContent, Tree};
use tether_protocol::jobs::{
    ClaimResponse, CompleteParams, Job, JobResponse, LeaseGrant, NewJobParams, ProgressParams,
    ProgressResponse, ReattachParams, RerunParams, ResumeParams,
};
use tether_protocol::pairing::{
    LinkParams, LinkedDevice, PairParams, PairResponse, RegisterParams, RegisterResponse,
};
use tether_protocol::push::{
    PushKey, SubscribeParams, Subscribed, Subscription, UpdateSubscriptionParams,
};
use tether_protocol::routes::{EVIDENCE_HEADER, LEASE_HEADER, PROTOCOL_HEADER};
use tether_protocol::secrets::{
    DeliveryAnswer, SecretsListing, SendSecretParams, SendSecretResponse,
};
use tether_protocol::ErrorBody;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ArrayBuilder, ComponentsBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{
    Content, InfoBuilder, OpenApi, OpenApiBuilder, PathItem, Paths, Ref, RefOr, Required,
};
use utoipa::ToSchema;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/openapi.json").route(web::get().to(serve)));
}

async fn serve() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(json())
}

/// The document as JSON, built once.
pub fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| document().to_json().unwrap_or_else(|_| String::from("{}")))
}

/// The whole document.
pub fn document() -> OpenApi {
    let mut spec = Spec::default();
    web_routes(&mut spec);
    push_routes(&mut spec);
    pairing_routes(&mut spec);
    device_routes(&mut spec);
    operator_routes(&mut spec);
    page_routes(&mut spec);
    spec.finish()
}

/// Who may call an operation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// Anyone.
    Public,
    /// A signed-in web user: the session cookie (with the CSRF header on changes) or an API
    /// token.
    User,
    /// A platform admin, signed in like [`Caller::User`].
    Admin,
    /// A paired device's token, with the protocol header.
    Device,
    /// A device, and the lease of the run the route is about.
    Lease,
}

fn web_routes(spec: &mut Spec) {
    spec.op(
        HttpMethod::Post,
        "/api/auth/signup",
        "Create an account and sign in",
        Caller::Public,
    )
    .body::<SignupParams>()
    .answer::<Me>(201, "Signed up; the session cookie is set.")
    .errors(&[400, 409, 413, 415, 422, 429, 503]);
    spec.op(
        HttpMethod::Post,
        "/api/auth/login",
        "Sign in",
        Caller::Public,
    )
    .body::<LoginParams>()
    .answer::<LoginResponse>(200, "Signed in; the session cookie is set.")
    .errors(&[400, 401, 413, 415, 422, 429, 503]);
    spec.op(
        HttpMethod::Post,
        "/api/auth/logout",
        "Sign out",
        Caller::Public,
    )
    .empty(204, "Signed out.")
    .errors(&[403]);
    spec.op(HttpMethod::Get, "/api/me", "Who is signed in", Caller::User)
        .answer::<Me>(200, "The caller and their account.")
        .errors(&[]);
    spec.op(
        HttpMethod::Post,
        "/api/tokens",
        "Create an API token (browser session only: 403 for a token)",
        Caller::User,
    )
    .body::<NewTokenParams>()
    .answer::<CreatedToken>(201, "The token, shown this once.")
    .errors(&[400, 403, 413, 415, 422, 429]);
    spec.op(
        HttpMethod::Get,
        "/api/tokens",
        "The caller's API tokens",
        Caller::User,
    )
    .answer_list::<ApiToken>(
        200,
        "Newest first, expired ones included; never the token itself.",
    )
    .errors(&[]);
    spec.op(
        HttpMethod::Delete,
        "/api/tokens/{id}",
        "Revoke an API token",
        Caller::User,
    )
    .empty(204, "Revoked: it answers 401 from now on.")
    .errors(&[400, 404]);
    spec.op(
        HttpMethod::Get,
        "/api/devices",
        "The account's computers",
        Caller::User,
    )
    .answer_list::<Device>(200, "Every computer of the account.")
    .errors(&[]);
    spec.op(
        HttpMethod::Patch,
        "/api/devices/{id}",
        "Rename a computer",
        Caller::User,
    )
    .body::<RenameParams>()
    .answer::<Device>(200, "The renamed computer.")
    .errors(&[400, 404, 413, 415, 422]);
    spec.op(
        HttpMethod::Delete,
        "/api/devices/{id}",
        "Revoke a computer",
        Caller::User,
    )
    .empty(204, "Revoked: its token answers 401 from now on.")
    .errors(&[400, 404]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/{id}/secrets",
        "Send a sealed secret",
        Caller::User,
    )
    .body::<SendSecretParams>()
    .answer::<SendSecretResponse>(202, "Kept until the computer takes it.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Get,
        "/api/devices/{id}/secrets",
        "Saved names and deliveries",
        Caller::User,
    )
    .answer::<SecretsListing>(200, "Names and delivery states, never a value.")
    .errors(&[400, 404]);
    spec.op(HttpMethod::Post, "/api/jobs", "Assign a job", Caller::User)
        .body::<NewJobParams>()
        .answer::<Job>(201, "The queued job.")
        .errors(&[400, 404, 413, 415, 422, 429]);
    spec.op(
        HttpMethod::Get,
        "/api/jobs",
        "The account's jobs",
        Caller::User,
    )
    .query("deviceId", "Only this computer's jobs.")
    .query("state", "Only jobs in this state.")
    .answer_list::<Job>(200, "Newest first.")
    .errors(&[400, 422]);
    spec.op(HttpMethod::Get, "/api/jobs/{id}", "One job", Caller::User)
        .answer::<Job>(200, "The job with its events, decisions and evidence.")
        .errors(&[400, 404]);
    spec.op(
        HttpMethod::Post,
        "/api/jobs/{id}/cancel",
        "Cancel a job",
        Caller::User,
    )
    .answer::<JobResponse>(200, "Cancelled, or cancel requested from its computer.")
    .errors(&[400, 404, 409]);
    spec.op(
        HttpMethod::Post,
        "/api/jobs/{id}/rerun",
        "Run a finished job again",
        Caller::User,
    )
    .body::<RerunParams>()
    .answer::<Job>(
        201,
        "The new job, with the same spec (and the new prompt if given).",
    )
    .errors(&[400, 404, 409, 413, 422, 429]);
    spec.op(
        HttpMethod::Get,
        "/api/jobs/{id}/tree",
        "List a job's folder",
        Caller::User,
    )
    .query(
        "path",
        "Relative to the job's folder; empty for the folder itself.",
    )
    .answer::<Tree>(200, "One folder, read live from the computer.")
    .errors(&[400, 404, 409, 422, 429, 504]);
    spec.op(
        HttpMethod::Get,
        "/api/jobs/{id}/file",
        "Read a file of a job's folder",
        Caller::User,
    )
    .query("path", "Relative to the job's folder.")
    .answer::<FileContent>(200, "The file, read live from the computer, redacted.")
    .errors(&[400, 404, 409, 422, 429, 504]);
    spec.op(
        HttpMethod::Get,
        "/api/jobs/{id}/diff",
        "What the run changed in one file",
        Caller::User,
    )
    .query("path", "Relative to the job's folder.")
    .stream(
        "text/plain",
        "The unified diff between the run's start and now, read live from the computer, \
         redacted, at most 256 KiB (then cut, saying so).",
    )
    .errors(&[400, 404, 409, 422, 429, 504]);
    spec.op(
        HttpMethod::Get,
        "/api/jobs/{id}/evidence/{evidence_id}",
        "Download evidence",
        Caller::User,
    )
    .bytes("The stored bytes.")
    .errors(&[400, 404, 409]);
    spec.op(
        HttpMethod::Get,
        "/api/decisions",
        "Decisions of the account's jobs",
        Caller::User,
    )
    .query("state", "`pending`, `answered`, `expired` or `withdrawn`.")
    .answer_list::<Decision>(200, "Newest first.")
    .errors(&[400, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/decisions/{id}/answer",
        "Answer a decision",
        Caller::User,
    )
    .body::<AnswerRequest>()
    .answer::<Decision>(200, "The answered decision.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Get,
        "/api/decisions/events",
        "Decision changes as server-sent events",
        Caller::User,
    )
    .stream(
        "text/event-stream",
        "`decisions` events with the change and the pending count.",
    )
    .errors(&[]);
    spec.op(
        HttpMethod::Get,
        "/api/admin/devices",
        "Every account's computers",
        Caller::Admin,
    )
    .answer_list::<AdminDevice>(200, "All computers.")
    .errors(&[403]);
    spec.op(
        HttpMethod::Delete,
        "/api/admin/devices/{id}",
        "Revoke any computer",
        Caller::Admin,
    )
    .empty(204, "Revoked.")
    .errors(&[400, 403, 404]);
}

fn push_routes(spec: &mut Spec) {
    spec.op(
        HttpMethod::Get,
        "/api/push/key",
        "The server's Web Push (VAPID) public key",
        Caller::User,
    )
    .answer::<PushKey>(200, "The key a browser subscribes with.")
    .errors(&[]);
    spec.op(
        HttpMethod::Post,
        "/api/push/subscriptions",
        "Subscribe a browser to push notifications",
        Caller::User,
    )
    .body::<SubscribeParams>()
    .answer::<Subscribed>(201, "Subscribed.")
    .answer::<Subscribed>(
        200,
        "This endpoint was subscribed already: updated, same id.",
    )
    .errors(&[400, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Get,
        "/api/push/subscriptions",
        "The account's push subscriptions",
        Caller::User,
    )
    .answer_list::<Subscription>(
        200,
        "Newest first; the endpoint's origin only, never its URL or keys.",
    )
    .errors(&[]);
    spec.op(
        HttpMethod::Get,
        "/api/push/subscriptions/{id}",
        "One push subscription",
        Caller::User,
    )
    .answer::<Subscription>(200, "The subscription.")
    .errors(&[400, 404]);
    spec.op(
        HttpMethod::Patch,
        "/api/push/subscriptions/{id}",
        "Turn kinds of notification on or off",
        Caller::User,
    )
    .body::<UpdateSubscriptionParams>()
    .answer::<Subscription>(200, "The subscription as it is now.")
    .errors(&[400, 404, 413, 415, 422]);
    spec.op(
        HttpMethod::Delete,
        "/api/push/subscriptions/{id}",
        "Unsubscribe a browser",
        Caller::User,
    )
    .empty(204, "Removed: nothing more is sent to it.")
    .errors(&[400, 404]);
}

fn pairing_routes(spec: &mut Spec) {
    spec.op(
        HttpMethod::Post,
        "/api/devices/pair",
        "Ask for a code pair",
        Caller::Public,
    )
    .body::<PairParams>()
    .answer::<PairResponse>(201, "The device code and the code the person enters.")
    .errors(&[400, 413, 415, 422, 429]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/register",
        "Redeem a linked code",
        Caller::Public,
    )
    .body::<RegisterParams>()
    .answer::<RegisterResponse>(200, "The device token, once.")
    .errors(&[400, 413, 415, 422, 429]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/link",
        "Approve a pairing code",
        Caller::User,
    )
    .body::<LinkParams>()
    .answer::<LinkedDevice>(200, "The computer that was paired.")
    .errors(&[400, 404, 413, 415, 422, 429]);
}

fn device_routes(spec: &mut Spec) {
    spec.op(
        HttpMethod::Get,
        "/api/devices/self",
        "This device",
        Caller::Device,
    )
    .answer::<DeviceSelf>(200, "Its id, name and account.")
    .errors(&[400]);
    spec.op(
        HttpMethod::Delete,
        "/api/devices/self",
        "Remove this device",
        Caller::Device,
    )
    .empty(204, "Removed.")
    .errors(&[400]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/heartbeat",
        "Report and extend leases",
        Caller::Device,
    )
    .body::<HeartbeatParams>()
    .answer::<HeartbeatResponse>(200, "Leases extended, lost runs, queued work.")
    .errors(&[400, 413, 415, 422, 429]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/claim",
        "Claim queued work",
        Caller::Device,
    )
    .answer::<ClaimResponse>(200, "A job under a new lease.")
    .empty(204, "Nothing queued for this device.")
    .errors(&[400, 429]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/jobs/{id}/progress",
        "Report output",
        Caller::Lease,
    )
    .body::<ProgressParams>()
    .answer::<ProgressResponse>(200, "The lease, extended.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/jobs/{id}/complete",
        "End a run",
        Caller::Lease,
    )
    .body::<CompleteParams>()
    .answer::<JobResponse>(200, "The finished job.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/jobs/{id}/reattach",
        "Take back a run after an outage",
        Caller::Device,
    )
    .body::<ReattachParams>()
    .answer::<LeaseGrant>(200, "A new lease for the same attempt.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/jobs/{id}/resume",
        "Carry on a run lost to a restart",
        Caller::Device,
    )
    .body::<ResumeParams>()
    .answer::<ClaimResponse>(200, "A new attempt in the same folder.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/jobs/{id}/ask",
        "Ask the owner",
        Caller::Lease,
    )
    .body::<AskRequest>()
    .answer::<AskResponse>(201, "The decision, pending.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Get,
        "/api/devices/self/decisions/{id}",
        "A decision of this device",
        Caller::Device,
    )
    .answer::<DeviceDecision>(200, "Its state and answer.")
    .errors(&[400, 404]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/decisions/{id}/close",
        "Close a decision",
        Caller::Device,
    )
    .body::<CloseRequest>()
    .answer::<Decision>(200, "The closed decision.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/jobs/{id}/evidence",
        "Attach a file to a run",
        Caller::Lease,
    )
    .header(
        EVIDENCE_HEADER,
        "base64url of the JSON description `{id, kind, name, size, sha256, mime?, caption?}`.",
    )
    .raw_body("The file's bytes.")
    .answer::<tether_protocol::jobs::Evidence>(201, "Stored.")
    .answer::<tether_protocol::jobs::Evidence>(200, "The same id again: already stored.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/file-requests/{id}",
        "Answer a file request",
        Caller::Device,
    )
    .body::<FileAnswer>()
    .empty(204, "Passed to the waiting request.")
    .errors(&[400, 404, 413, 415, 422]);
    spec.op(
        HttpMethod::Post,
        "/api/devices/self/secret-deliveries/{id}",
        "Report a delivery",
        Caller::Device,
    )
    .body::<DeliveryAnswer>()
    .answer_object(200, "Recorded; the box is dropped.")
    .errors(&[400, 404, 409, 413, 415, 422]);
    spec.op(
        HttpMethod::Get,
        "/api/devices/self/events",
        "The wake-up stream (WebSocket)",
        Caller::Device,
    )
    .empty(101, "Switching to the WebSocket protocol.")
    .errors(&[400]);
}

fn operator_routes(spec: &mut Spec) {
    spec.op(HttpMethod::Get, "/healthz", "Serving", Caller::Public)
        .answer_object(200, "`{\"status\": \"ok\"}`.")
        .errors(&[]);
    spec.op(
        HttpMethod::Get,
        "/readyz",
        "Store and hub reachable",
        Caller::Public,
    )
    .answer_object(200, "`{\"status\": \"ready\"}`.")
    .errors(&[503]);
    spec.op(
        HttpMethod::Get,
        "/api/openapi.json",
        "This document",
        Caller::Public,
    )
    .answer_object(200, "OpenAPI 3.1.")
    .errors(&[]);
}

fn page_routes(spec: &mut Spec) {
    for (path, summary) in [
        ("/", "Home: the Computers page, or sign in"),
        ("/signin", "Sign in"),
        ("/signup", "Sign up"),
        ("/account", "Account and API tokens"),
        (
            "/account/notifications",
            "Notifications on this and other devices",
        ),
        ("/computers", "Computers"),
        ("/link", "Approve a pairing code"),
        ("/assign", "Assign a job"),
        ("/needs-me", "Pending decisions"),
        ("/jobs", "Jobs"),
        ("/jobs/{id}", "One job"),
    ] {
        spec.op(HttpMethod::Get, path, summary, Caller::Public)
            .tag("pages")
            .stream("text/html", "The page, or a redirect to sign in.")
            .redirect();
    }
    for (path, media) in [
        ("/assets/app.js", "text/javascript"),
        ("/assets/seal.js", "text/javascript"),
        ("/assets/secrets.js", "text/javascript"),
        ("/assets/needs_me.js", "text/javascript"),
        ("/assets/job.js", "text/javascript"),
        ("/assets/assign.js", "text/javascript"),
        ("/assets/notifications.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
        ("/sw.js", "text/javascript"),
        ("/manifest.webmanifest", "application/manifest+json"),
        ("/assets/offline.html", "text/html"),
        ("/favicon.ico", "image/x-icon"),
        ("/assets/icon.svg", "image/svg+xml"),
        ("/assets/icon-192.png", "image/png"),
        ("/assets/icon-512.png", "image/png"),
        ("/assets/icon-maskable-512.png", "image/png"),
        ("/assets/apple-touch-icon.png", "image/png"),
    ] {
        spec.op(HttpMethod::Get, path, "A page asset", Caller::Public)
            .tag("pages")
            .stream(media, "The asset.");
    }
}

/// The document under construction: paths, and every schema they name.
#[derive(Default)]
struct Spec {
    paths: Paths,
    components: Vec<(String, RefOr<Schema>)>,
}

impl Spec {
    fn op(
        &mut self,
        method: HttpMethod,
        path: &'static str,
        summary: &str,
        caller: Caller,
    ) -> Op<'_> {
        let mut builder = OperationBuilder::new()
            .summary(Some(summary))
            .operation_id(Some(operation_id(&method, path)))
            .tag(tag(path, caller));
        for name in path_parameters(path) {
            builder = builder.parameter(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Path)
                    .required(Required::True)
                    .schema(Some(string_schema())),
            );
        }
        builder = with_caller(builder, caller);
        Op {
            spec: self,
            method,
            path,
            caller,
            builder: Some(builder),
            has_body: false,
        }
    }

    fn schema<T: ToSchema>(&mut self) -> RefOr<Schema> {
        T::schemas(&mut self.components);
        self.components.push((T::name().into_owned(), T::schema()));
        RefOr::Ref(Ref::from_schema_name(T::name()))
    }

    fn finish(mut self) -> OpenApi {
        self.schema::<ErrorBody>();
        let components = ComponentsBuilder::new()
            .schemas_from_iter(self.components)
            .security_scheme(
                "session",
                SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                    "tether_session",
                    "The session cookie of a signed-in browser. Changes also need the \
                     `x-tether-csrf` header and a same-origin `Origin`.",
                ))),
            )
            .security_scheme(
                "userToken",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("tut_…")
                        .description(Some("An API token made at POST /api/tokens."))
                        .build(),
                ),
            )
            .security_scheme(
                "deviceToken",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("tdt_…")
                        .description(Some("A device token from POST /api/devices/register."))
                        .build(),
                ),
            )
            .build();
        OpenApiBuilder::new()
            .info(
                InfoBuilder::new()
                    .title("Tether")
                    .version(env!("CARGO_PKG_VERSION"))
                    .description(Some(
                        "Assign work to your own computers, approve what it asks for, get \
                         the results back. Every error is `{\"error\": {\"code\", \"message\"}}`.",
                    ))
                    .build(),
            )
            .paths(self.paths)
            .components(Some(components))
            .build()
    }
}

/// One operation being described; added to the document when dropped.
struct Op<'a> {
    spec: &'a mut Spec,
    method: HttpMethod,
    path: &'static str,
    caller: Caller,
    builder: Option<OperationBuilder>,
    has_body: bool,
}

impl Op<'_> {
    fn map(&mut self, f: impl FnOnce(OperationBuilder) -> OperationBuilder) -> &mut Self {
        self.builder = self.builder.take().map(f);
        self
    }

    fn tag(&mut self, tag: &str) -> &mut Self {
        let tag = tag.to_owned();
        self.map(|builder| builder.tags(Some([tag])))
    }

    fn body<T: ToSchema>(&mut self) -> &mut Self {
        let schema = self.spec.schema::<T>();
        self.has_body = true;
        self.map(|builder| {
            builder.request_body(Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content("application/json", Content::new(Some(schema)))
                    .build(),
            ))
        })
    }

    fn raw_body(&mut self, description: &str) -> &mut Self {
        self.has_body = true;
        let schema = Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Binary,
                )))
                .build(),
        );
        self.map(|builder| {
            builder.request_body(Some(
                RequestBodyBuilder::new()
                    .description(Some(description))
                    .required(Some(Required::True))
                    .content("application/octet-stream", Content::new(Some(schema)))
                    .build(),
            ))
        })
    }

    fn query(&mut self, name: &str, description: &str) -> &mut Self {
        let parameter = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Query)
            .required(Required::False)
            .description(Some(description))
            .schema(Some(string_schema()));
        self.map(|builder| builder.parameter(parameter))
    }

    fn header(&mut self, name: &str, description: &str) -> &mut Self {
        let parameter = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::True)
            .description(Some(description))
            .schema(Some(string_schema()));
        self.map(|builder| builder.parameter(parameter))
    }

    fn answer<T: ToSchema>(&mut self, status: u16, description: &str) -> &mut Self {
        let schema = self.spec.schema::<T>();
        self.json_answer(status, description, schema)
    }

    fn answer_list<T: ToSchema>(&mut self, status: u16, description: &str) -> &mut Self {
        let item = self.spec.schema::<T>();
        let list = RefOr::T(Schema::Array(ArrayBuilder::new().items(item).build()));
        self.json_answer(status, description, list)
    }

    fn answer_object(&mut self, status: u16, description: &str) -> &mut Self {
        let object = RefOr::T(Schema::Object(
            ObjectBuilder::new().schema_type(Type::Object).build(),
        ));
        self.json_answer(status, description, object)
    }

    fn json_answer(&mut self, status: u16, description: &str, schema: RefOr<Schema>) -> &mut Self {
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", Content::new(Some(schema)))
            .build();
        self.map(|builder| builder.response(status.to_string(), response))
    }

    fn empty(&mut self, status: u16, description: &str) -> &mut Self {
        let response = ResponseBuilder::new().description(description).build();
        self.map(|builder| builder.response(status.to_string(), response))
    }

    fn bytes(&mut self, description: &str) -> &mut Self {
        self.stream("application/octet-stream", description)
    }

    /// A 200 answer that is not JSON: a page, an asset, bytes, an event stream.
    fn stream(&mut self, media: &str, description: &str) -> &mut Self {
        let response = ResponseBuilder::new()
            .description(description)
            .content(media, Content::new(Some(string_schema())))
            .build();
        self.map(|builder| builder.response("200", response))
    }

    fn redirect(&mut self) -> &mut Self {
        self.empty(303, "Not signed in: to the sign-in page.")
    }

    /// The error answers this operation gives, plus those every operation of its kind can.
    fn errors(&mut self, statuses: &[u16]) -> &mut Self {
        let mut all: Vec<u16> = statuses.to_vec();
        match self.caller {
            Caller::Public => {}
            Caller::User | Caller::Admin => all.extend([401, 403]),
            Caller::Device | Caller::Lease => all.extend([400, 401]),
        }
        if self.caller == Caller::Lease {
            all.push(409);
        }
        if self.has_body || self.method != HttpMethod::Get {
            all.extend([400, 408, 413]);
        }
        // Past the connection cap every route but the liveness check answers 503.
        if self.path != "/healthz" {
            all.push(503);
        }
        // Every route answers a wrong method with 405 and a path that does not parse with 404.
        all.extend([404, 405]);
        all.sort_unstable();
        all.dedup();
        let error = self.spec.schema::<ErrorBody>();
        for status in all {
            let response = ResponseBuilder::new()
                .description(error_description(status))
                .content("application/json", Content::new(Some(error.clone())))
                .build();
            self.map(|builder| builder.response(status.to_string(), response));
        }
        self
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if let Some(builder) = self.builder.take() {
            self.spec.paths.add_path_operation(
                self.path,
                vec![self.method.clone()],
                builder.build(),
            );
        }
    }
}

fn with_caller(builder: OperationBuilder, caller: Caller) -> OperationBuilder {
    let none: [&str; 0] = [];
    let builder = match caller {
        Caller::Public => builder,
        Caller::User | Caller::Admin => builder
            .security(SecurityRequirement::new("session", none))
            .security(SecurityRequirement::new("userToken", none)),
        Caller::Device | Caller::Lease => builder
            .security(SecurityRequirement::new("deviceToken", none))
            .parameter(
                ParameterBuilder::new()
                    .name(PROTOCOL_HEADER)
                    .parameter_in(ParameterIn::Header)
                    .required(Required::True)
                    .description(Some("The protocol version the device speaks: `1`."))
                    .schema(Some(string_schema())),
            ),
    };
    if caller != Caller::Lease {
        return builder;
    }
    builder.parameter(
        ParameterBuilder::new()
            .name(LEASE_HEADER)
            .parameter_in(ParameterIn::Header)
            .required(Required::True)
            .description(Some(
                "The lease token of the run; a wrong or old one is 409 `stale_lease`.",
            ))
            .schema(Some(string_schema())),
    )
}

fn tag(path: &str, caller: Caller) -> &'static str {
    match caller {
        Caller::Device | Caller::Lease => "device",
        Caller::Admin => "admin",
        Caller::User => "web",
        Caller::Public if path.starts_with("/api/devices/") => "pairing",
        Caller::Public if path.starts_with("/api/") => "web",
        Caller::Public => "operator",
    }
}

fn error_description(status: u16) -> &'static str {
    match status {
        400 => "Malformed input (`invalid_request` and others naming the problem).",
        401 => "Not signed in, a wrong token, or a revoked device.",
        403 => "Not allowed (an admin route, or a change without the CSRF check).",
        404 => "Unknown, or another account's.",
        405 => "Another method.",
        409 => "In the wrong state for this (`stale_lease`, `already_answered`, …).",
        408 => "The body did not arrive in time (`request_timeout`); the connection is closed.",
        413 => "The body is too large.",
        415 => "The body's type is not what the route takes.",
        422 => "A field's value is not accepted; the message names it.",
        429 => "Too many requests; `Retry-After` says when to try again.",
        503 => "Busy (`unavailable`: a dependency is down, or too many connections are open); `Retry-After` says when to try again.",
        504 => "The computer did not answer in time.",
        _ => "An error.",
    }
}

fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
}

fn operation_id(method: &HttpMethod, path: &str) -> String {
    let method = method_name(method).to_ascii_lowercase();
    let words: Vec<&str> = path
        .split(['/', '-', '.', '_'])
        .filter(|word| !word.is_empty() && *word != "api")
        .map(|word| word.trim_start_matches('{').trim_end_matches('}'))
        .collect();
    if words.is_empty() {
        return format!("{method}_home");
    }
    format!("{method}_{}", words.join("_"))
}

fn method_name(method: &HttpMethod) -> &'static str {
    match method {
        HttpMethod::Get => "GET",
        HttpMethod::Post => "POST",
        HttpMethod::Put => "PUT",
        HttpMethod::Delete => "DELETE",
        HttpMethod::Options => "OPTIONS",
        HttpMethod::Head => "HEAD",
        HttpMethod::Patch => "PATCH",
        HttpMethod::Trace => "TRACE",
    }
}

fn string_schema() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new().schema_type(Type::String).build(),
    ))
}

/// A path template of this document for an actix resource pattern (they share `{name}`).
pub fn has_operation(method: &str, path: &str) -> bool {
    let document = document();
    let Some(item) = document.paths.paths.get(path) else {
        return false;
    };
    operation_of(item, method)
}

fn operation_of(item: &PathItem, method: &str) -> bool {
    match method {
        "GET" => item.get.is_some(),
        "POST" => item.post.is_some(),
        "PATCH" => item.patch.is_some(),
        "PUT" => item.put.is_some(),
        "DELETE" => item.delete.is_some(),
        _ => false,
    }
}
