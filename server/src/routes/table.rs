//! The route table. Each route is declared once — method, path, handler, who may call it, and
//! what the OpenAPI document says of it — and the one declaration has two sinks: mounting on
//! actix, and the document. A route cannot be served without being described.
//!
//! An `/api/` path is one resource for all its methods, so another method is 405
//! `method_not_allowed`; a page, an asset or a probe matches its method only, and another
//! falls to the unknown-route answer (a 404 page for a browser).

use actix_web::http::Method;
use actix_web::{guard, web, FromRequest, Handler, Resource, Responder, Route};
use tether_protocol::routes::{CSRF_HEADER, LEASE_HEADER, PROTOCOL_HEADER};
use tether_protocol::{ErrorBody, PROTOCOL_VERSION};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{Content, KnownFormat, Paths, Ref, RefOr, Required, SchemaFormat};
use utoipa::ToSchema;

use super::idempotency::{self, IDEMPOTENCY_HEADER};
use crate::auth::CSRF_COOKIE;

/// A part of the server that declares routes: the API's modules, and the pages.
pub type Wing = fn(&mut Table);

/// Who may call an operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone.
    Public,
    /// An agent that has no token yet (pairing): no credential, its protocol header.
    Agent,
    /// A signed-in web user: the session cookie (with the CSRF header on changes) or an API
    /// token.
    User,
    /// A platform admin, signed in like [`Access::User`].
    Admin,
    /// A paired device's token, with the protocol header.
    Device,
    /// A device, and the lease of the run the route is about.
    Lease,
    /// A page: the browser's session cookie when it has one; without, a redirect to sign in
    /// (or the sign-in page itself).
    Page,
}

/// The routes declared so far, in order, and what becomes of them.
pub struct Table {
    sink: Sink,
}

enum Sink {
    /// actix resources, one per `/api/` path and one per other route.
    Mount(Vec<Mount>),
    /// The document's paths, and every schema they name.
    Document {
        paths: Paths,
        schemas: Vec<(String, RefOr<Schema>)>,
    },
}

/// A resource to make at mount time, when its scope is known: its path, the method it is
/// guarded by (pages, assets and probes), and what was added to it, in order.
struct Mount {
    path: &'static str,
    method: Option<Method>,
    edits: Vec<Box<dyn FnOnce(Resource) -> Resource>>,
}

impl Mount {
    /// The resource at `relative`, the rest of its path past its scope's prefix.
    fn into_resource(self, relative: &str) -> Resource {
        let mut resource = web::resource(relative);
        if let Some(method) = self.method {
            resource = resource.guard(guard::Method(method));
        }
        self.edits
            .into_iter()
            .fold(resource, |resource, edit| edit(resource))
    }
}

/// The document's part the table writes: paths and schemas.
#[derive(Default)]
pub struct Described {
    pub paths: Paths,
    pub schemas: Vec<(String, RefOr<Schema>)>,
}

/// `table.get(path, handler, access, summary)` and the other methods, each mounting
/// `handler` as actix's `web::get().to(handler)` would.
macro_rules! verbs {
    ($($name:ident => $verb:ident;)*) => {$(
        pub fn $name<F, Args>(
            &mut self,
            path: &'static str,
            handler: F,
            access: Access,
            summary: &str,
        ) -> Op<'_>
        where
            F: Handler<Args>,
            Args: FromRequest + 'static,
            F::Output: Responder + 'static,
        {
            let route = web::$name().to(handler);
            self.declare(Verb::$verb, path, route, access, summary)
        }
    )*};
}

impl Table {
    verbs! {
        get => Get;
        post => Post;
        patch => Patch;
        delete => Delete;
    }

    /// Declares every route of `wings` and registers them on `cfg`, in the order declared.
    ///
    /// Routes are mounted in scopes by the static start of their paths (see [`scopes`]), so
    /// a request is matched against its scope's few routes, not every route's pattern.
    pub fn mount(cfg: &mut web::ServiceConfig, wings: &[Wing]) {
        let Sink::Mount(mounts) = declare_all(Sink::Mount(Vec::new()), wings) else {
            return;
        };
        for (prefix, mounts) in scopes(mounts) {
            // No static start (a path opening with a parameter), or a lone exact path such
            // as `/`, whose scope would take every URL under it: mounted as they are.
            let whole = mounts.len() == 1 && mounts[0].path == prefix;
            if prefix.is_empty() || whole {
                for mount in mounts {
                    let path = mount.path;
                    cfg.service(mount.into_resource(path));
                }
                continue;
            }
            let mut scope = web::scope(prefix);
            for mount in mounts {
                let relative = &mount.path[prefix.len()..];
                scope = scope.service(mount.into_resource(relative));
            }
            cfg.service(scope);
        }
    }

    /// Declares every route of `wings` and returns their description.
    pub fn describe(wings: &[Wing]) -> Described {
        let sink = Sink::Document {
            paths: Paths::new(),
            schemas: Vec::new(),
        };
        let Sink::Document { paths, mut schemas } = declare_all(sink, wings) else {
            return Described::default();
        };
        push_schema::<ErrorBody>(&mut schemas);
        Described { paths, schemas }
    }

    /// A page: HTML, or a redirect to sign in.
    pub fn page<F, Args>(&mut self, path: &'static str, handler: F, summary: &str) -> Op<'_>
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        let mut op = self.declare(
            Verb::Get,
            path,
            web::get().to(handler),
            Access::Page,
            summary,
        );
        op.stream("text/html", "The page, or a redirect to sign in.")
            .empty(303, "Not signed in: to the sign-in page.");
        op
    }

    /// A file the pages load, of type `media`, for anyone.
    pub fn asset<F, Args>(&mut self, path: &'static str, handler: F, media: &str) -> Op<'_>
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        let route = web::get().to(handler);
        let mut op = self.declare(Verb::Get, path, route, Access::Public, "A page asset");
        op.map(|builder| {
            builder
                .tags(Some(["pages"]))
                .operation_id(Some(operation_id("asset", path)))
        })
        .stream(media, "The asset.");
        op
    }

    fn declare(
        &mut self,
        verb: Verb,
        path: &'static str,
        route: Route,
        access: Access,
        summary: &str,
    ) -> Op<'_> {
        let (builder, route) = match &mut self.sink {
            Sink::Mount(mounts) => {
                add_resource(mounts, verb, path);
                (None, Some(route))
            }
            Sink::Document { .. } => (Some(operation(verb, path, access, summary)), None),
        };
        Op {
            table: self,
            verb,
            path,
            access,
            builder,
            route,
            has_body: false,
        }
    }
}

fn declare_all(sink: Sink, wings: &[Wing]) -> Sink {
    let mut table = Table { sink };
    for wing in wings {
        wing(&mut table);
    }
    table.sink
}

/// The static start of a path, at most two segments (`/api/devices` of
/// `/api/devices/{id}`, `/jobs` of `/jobs/{id}`); empty when its first segment is a
/// parameter.
fn static_start(path: &str) -> &str {
    let mut end = 0;
    for segment in path.split('/').skip(1).take(2) {
        if segment.contains('{') {
            break;
        }
        end += 1 + segment.len();
    }
    &path[..end]
}

/// Whether `prefix` leads `path` on a segment boundary (the empty prefix leads every path).
fn leads(prefix: &str, path: &str) -> bool {
    path == prefix || (path.starts_with(prefix) && path[prefix.len()..].starts_with('/'))
}

/// The mounts grouped by prefix, in the order each prefix first appears, each mount in
/// declaration order. A mount's prefix is the shortest static start of any route that leads
/// its path, so no two prefixes lead one another and one URL can match routes of one group
/// only: the order that decides between routes (`/jobs/new` before `/jobs/{id}`) is kept
/// inside the group.
fn scopes(mounts: Vec<Mount>) -> Vec<(&'static str, Vec<Mount>)> {
    let starts: Vec<&'static str> = mounts
        .iter()
        .map(|mount| static_start(mount.path))
        .collect();
    let mut groups: Vec<(&'static str, Vec<Mount>)> = Vec::new();
    for mount in mounts {
        let own = static_start(mount.path);
        let prefix = starts
            .iter()
            .copied()
            .filter(|start| leads(start, own))
            .min_by_key(|start| start.len())
            .unwrap_or(own);
        match groups.iter_mut().find(|(known, _)| *known == prefix) {
            Some((_, group)) => group.push(mount),
            None => groups.push((prefix, vec![mount])),
        }
    }
    groups
}

/// Makes the resource a route of `path` joins: its path's (an `/api/` path, made by the
/// first route of it), or one of its own. It is always the last mount of `path`.
fn add_resource(mounts: &mut Vec<Mount>, verb: Verb, path: &'static str) {
    let shared = path.starts_with("/api/");
    if shared && mounts.iter().any(|mount| mount.path == path) {
        return;
    }
    mounts.push(Mount {
        path,
        method: (!shared).then(|| verb.method()),
        edits: Vec::new(),
    });
}

/// Adds `route` to the resource [`add_resource`] made for `path`.
fn add_route(mounts: &mut [Mount], path: &'static str, route: Route) {
    if let Some(mount) = mounts.iter_mut().rev().find(|mount| mount.path == path) {
        mount
            .edits
            .push(Box::new(move |resource: Resource| resource.route(route)));
    }
}

/// One operation being declared; added to the document when dropped.
pub struct Op<'a> {
    table: &'a mut Table,
    verb: Verb,
    path: &'static str,
    access: Access,
    /// `None` while mounting: then only [`Op::resource_data`] does anything.
    builder: Option<OperationBuilder>,
    /// While mounting, the route, added to its resource when the operation is dropped (so
    /// [`Op::idempotent`] can wrap it first); `None` while documenting.
    route: Option<Route>,
    has_body: bool,
}

impl Op<'_> {
    /// Data for every route of this `/api/` path (actix's `Resource::app_data`), such as a
    /// larger JSON limit.
    pub fn resource_data<U: 'static>(&mut self, data: U) -> &mut Self {
        if let Sink::Mount(mounts) = &mut self.table.sink {
            if let Some(mount) = mounts
                .iter_mut()
                .rev()
                .find(|mount| mount.path == self.path)
            {
                mount
                    .edits
                    .push(Box::new(move |resource: Resource| resource.app_data(data)));
            }
        }
        self
    }

    pub fn body<T: ToSchema>(&mut self) -> &mut Self {
        self.has_body = true;
        let Some(schema) = self.schema::<T>() else {
            return self;
        };
        self.map(|builder| {
            builder.request_body(Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content("application/json", Content::new(Some(schema)))
                    .build(),
            ))
        })
    }

    /// A body of raw bytes, streamed.
    pub fn raw_body(&mut self, description: &str) -> &mut Self {
        self.has_body = true;
        let schema = Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
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

    /// A route that creates: it takes `Idempotency-Key`, so a retried request answers the
    /// first result instead of creating again (see `idempotency`). Documents the header and
    /// the answers it adds.
    pub fn idempotent(&mut self) -> &mut Self {
        self.route = self
            .route
            .take()
            .map(|route| route.wrap(actix_web::middleware::from_fn(idempotency::idempotent)));
        let parameter = parameter(
            IDEMPOTENCY_HEADER,
            ParameterIn::Header,
            Required::False,
            &idempotency::description(),
        );
        self.map(|builder| builder.parameter(parameter))
            .error_answers(vec![400, 409, 422])
    }

    /// An optional query parameter.
    pub fn query(&mut self, name: &str, description: &str) -> &mut Self {
        let parameter = parameter(name, ParameterIn::Query, Required::False, description);
        self.map(|builder| builder.parameter(parameter))
    }

    /// A required header.
    pub fn header(&mut self, name: &str, description: &str) -> &mut Self {
        let parameter = parameter(name, ParameterIn::Header, Required::True, description);
        self.map(|builder| builder.parameter(parameter))
    }

    pub fn answer<T: ToSchema>(&mut self, status: u16, description: &str) -> &mut Self {
        let Some(schema) = self.schema::<T>() else {
            return self;
        };
        self.json_answer(status, description, schema)
    }

    pub fn answer_list<T: ToSchema>(&mut self, status: u16, description: &str) -> &mut Self {
        let Some(item) = self.schema::<T>() else {
            return self;
        };
        let list = RefOr::T(Schema::Array(ArrayBuilder::new().items(item).build()));
        self.json_answer(status, description, list)
    }

    pub fn answer_object(&mut self, status: u16, description: &str) -> &mut Self {
        let object = RefOr::T(Schema::Object(
            ObjectBuilder::new().schema_type(Type::Object).build(),
        ));
        self.json_answer(status, description, object)
    }

    /// An answer without a body.
    pub fn empty(&mut self, status: u16, description: &str) -> &mut Self {
        let response = ResponseBuilder::new().description(description).build();
        self.map(|builder| builder.response(status.to_string(), response))
    }

    pub fn bytes(&mut self, description: &str) -> &mut Self {
        self.stream("application/octet-stream", description)
    }

    /// A 200 answer that is not JSON: a page, an asset, bytes, an event stream.
    pub fn stream(&mut self, media: &str, description: &str) -> &mut Self {
        let response = ResponseBuilder::new()
            .description(description)
            .content(media, Content::new(Some(string_schema())))
            .build();
        self.map(|builder| builder.response("200", response))
    }

    /// The error answers this operation gives, plus those every operation of its kind can.
    pub fn errors(&mut self, statuses: &[u16]) -> &mut Self {
        let mut all: Vec<u16> = statuses.to_vec();
        match self.access {
            Access::Public | Access::Page => {}
            Access::Agent => all.push(400),
            Access::User | Access::Admin => all.extend([401, 403]),
            Access::Device => all.extend([400, 401]),
            Access::Lease => all.extend([400, 401, 409]),
        }
        if self.has_body || self.verb != Verb::Get {
            all.extend([400, 408, 413]);
        }
        // A body of another content type than the route takes.
        if self.has_body {
            all.push(415);
        }
        // Past the connection cap every route but the liveness check answers 503.
        if self.path != "/healthz" {
            all.push(503);
        }
        // A path that does not parse is 404; another method on an API path is 405.
        all.push(404);
        if self.path.starts_with("/api/") {
            all.push(405);
        }
        self.error_answers(all)
    }

    /// An error answer for each of `statuses`.
    fn error_answers(&mut self, mut all: Vec<u16>) -> &mut Self {
        all.sort_unstable();
        all.dedup();
        let Some(error) = self.schema::<ErrorBody>() else {
            return self;
        };
        for status in all {
            let response = ResponseBuilder::new()
                .description(error_description(status))
                .content("application/json", Content::new(Some(error.clone())))
                .build();
            self.map(|builder| builder.response(status.to_string(), response));
        }
        self
    }

    fn map(&mut self, f: impl FnOnce(OperationBuilder) -> OperationBuilder) -> &mut Self {
        self.builder = self.builder.take().map(f);
        self
    }

    /// A reference to `T`'s schema, which the document then holds; `None` while mounting.
    fn schema<T: ToSchema>(&mut self) -> Option<RefOr<Schema>> {
        match &mut self.table.sink {
            Sink::Document { schemas, .. } => Some(push_schema::<T>(schemas)),
            Sink::Mount(_) => None,
        }
    }

    fn json_answer(&mut self, status: u16, description: &str, schema: RefOr<Schema>) -> &mut Self {
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", Content::new(Some(schema)))
            .build();
        self.map(|builder| builder.response(status.to_string(), response))
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if let (Some(route), Sink::Mount(mounts)) = (self.route.take(), &mut self.table.sink) {
            add_route(mounts, self.path, route);
        }
        let Some(builder) = self.builder.take() else {
            return;
        };
        if let Sink::Document { paths, .. } = &mut self.table.sink {
            paths.add_path_operation(self.path, vec![self.verb.openapi()], builder.build());
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
    Patch,
    Delete,
}

impl Verb {
    fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }

    fn openapi(self) -> HttpMethod {
        match self {
            Verb::Get => HttpMethod::Get,
            Verb::Post => HttpMethod::Post,
            Verb::Patch => HttpMethod::Patch,
            Verb::Delete => HttpMethod::Delete,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// The operation's frame: summary, id, tag, path parameters, who may call it.
fn operation(verb: Verb, path: &str, access: Access, summary: &str) -> OperationBuilder {
    let prefix = match access {
        Access::Page => "page",
        _ => verb.name(),
    };
    let mut builder = OperationBuilder::new()
        .summary(Some(summary))
        .operation_id(Some(operation_id(prefix, path)))
        .tag(tag(path, access));
    for name in path_parameters(path) {
        builder = builder.parameter(parameter(name, ParameterIn::Path, Required::True, ""));
    }
    let none: [&str; 0] = [];
    match access {
        Access::Public => builder,
        Access::Agent => builder.parameter(protocol_header(Required::False)),
        Access::User | Access::Admin if verb != Verb::Get => builder
            .security(SecurityRequirement::new("session", none))
            .security(SecurityRequirement::new("userToken", none))
            .parameter(csrf_header()),
        Access::User | Access::Admin => builder
            .security(SecurityRequirement::new("session", none))
            .security(SecurityRequirement::new("userToken", none)),
        Access::Device => builder
            .security(SecurityRequirement::new("deviceToken", none))
            .parameter(protocol_header(Required::True)),
        Access::Lease => builder
            .security(SecurityRequirement::new("deviceToken", none))
            .parameter(protocol_header(Required::True))
            .parameter(parameter(
                LEASE_HEADER,
                ParameterIn::Header,
                Required::True,
                "The lease token of the run; a wrong or old one is 409 `stale_lease`.",
            )),
        Access::Page => builder
            .security(SecurityRequirement::new("session", none))
            .security(SecurityRequirement::default()),
    }
}

/// API operations keep the ids their method and path give (`get_jobs_id`), so generated
/// clients keep their names; pages and assets take a prefix of their own (`page_jobs_id`,
/// `asset_app_js`), apart from the API's.
fn operation_id(prefix: &str, path: &str) -> String {
    let words: Vec<&str> = path
        .split(['/', '-', '.', '_'])
        .filter(|word| !word.is_empty() && *word != "api")
        .filter(|word| !(prefix == "asset" && *word == "assets"))
        .map(|word| word.trim_start_matches('{').trim_end_matches('}'))
        .collect();
    if words.is_empty() {
        return format!("{prefix}_home");
    }
    format!("{prefix}_{}", words.join("_"))
}

fn tag(path: &str, access: Access) -> &'static str {
    match access {
        Access::Device | Access::Lease => "device",
        Access::Admin => "admin",
        Access::User => "web",
        Access::Agent => "pairing",
        Access::Page => "pages",
        Access::Public if path.starts_with("/api/") => "web",
        Access::Public => "operator",
    }
}

fn protocol_header(required: Required) -> ParameterBuilder {
    let version = PROTOCOL_VERSION.to_string();
    ParameterBuilder::new()
        .name(PROTOCOL_HEADER)
        .parameter_in(ParameterIn::Header)
        .required(required)
        .description(Some(format!(
            "The protocol version the agent speaks: `{version}`; another is 400 \
             `unsupported_protocol`."
        )))
        .schema(Some(RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([version]))
                .build(),
        ))))
}

/// The CSRF header of a change made with the session cookie (`auth` checks it for every
/// unsafe method, on whatever path). Optional, because an API token needs none.
fn csrf_header() -> ParameterBuilder {
    parameter(
        CSRF_HEADER,
        ParameterIn::Header,
        Required::False,
        &format!(
            "With the session cookie: the session's CSRF token (the `{CSRF_COOKIE}` cookie, or \
             this header on the sign-in answer); without it 403 `csrf_rejected`. An API token \
             needs none."
        ),
    )
}

fn parameter(
    name: &str,
    at: ParameterIn,
    required: Required,
    description: &str,
) -> ParameterBuilder {
    let builder = ParameterBuilder::new()
        .name(name)
        .parameter_in(at)
        .required(required)
        .schema(Some(string_schema()));
    if description.is_empty() {
        return builder;
    }
    builder.description(Some(description))
}

fn push_schema<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
    T::schemas(schemas);
    schemas.push((T::name().into_owned(), T::schema()));
    RefOr::Ref(Ref::from_schema_name(T::name()))
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

fn string_schema() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new().schema_type(Type::String).build(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grouped(paths: &[&'static str]) -> Vec<(&'static str, Vec<&'static str>)> {
        let mounts = paths
            .iter()
            .map(|path| Mount {
                path,
                method: None,
                edits: Vec::new(),
            })
            .collect();
        scopes(mounts)
            .into_iter()
            .map(|(prefix, mounts)| (prefix, mounts.iter().map(|mount| mount.path).collect()))
            .collect()
    }

    #[test]
    fn a_path_starts_with_at_most_two_static_segments() {
        assert_eq!(static_start("/api/devices/{id}/rename"), "/api/devices");
        assert_eq!(static_start("/api/devices"), "/api/devices");
        assert_eq!(static_start("/jobs/{id}"), "/jobs");
        assert_eq!(static_start("/"), "/");
        assert_eq!(static_start("/{file}"), "");
        assert!(leads("/jobs", "/jobs/new") && leads("/jobs", "/jobs"));
        assert!(!leads("/jobs", "/jobsx") && !leads("/", "/jobs"));
    }

    #[test]
    fn routes_that_can_match_one_url_share_a_scope_in_their_order() {
        let paths = [
            "/api/devices/self/heartbeat",
            "/jobs/new",
            "/api/devices/{id}",
            "/jobs/{id}",
            "/",
            "/api/devices",
            "/jobs",
        ];
        assert_eq!(
            grouped(&paths),
            [
                (
                    "/api/devices",
                    vec![
                        "/api/devices/self/heartbeat",
                        "/api/devices/{id}",
                        "/api/devices"
                    ]
                ),
                ("/jobs", vec!["/jobs/new", "/jobs/{id}", "/jobs"]),
                ("/", vec!["/"]),
            ]
        );
        // A path that starts with a parameter could match any URL: nothing is scoped.
        let groups = grouped(&["/api/jobs", "/{file}", "/jobs/{id}"]);
        assert_eq!(groups, [("", vec!["/api/jobs", "/{file}", "/jobs/{id}"])]);
    }
}
