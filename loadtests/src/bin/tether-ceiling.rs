//! The ceiling of the HTTP layer on this machine: a bare actix-web server answering a JSON
//! body with a small JSON answer, on the heartbeat's path, with as many workers as cores.
//! `loadtests/run.sh` puts it under the same wrk load as the real heartbeat route, so the
//! report can say how close Tether comes to what actix-web itself does here.
//!
//! ```sh
//! tether-ceiling 127.0.0.1:8099
//! ```

use actix_web::{web, App, HttpResponse, HttpServer};

async fn answer(body: web::Json<serde_json::Value>) -> HttpResponse {
    let fields = body.as_object().map_or(0, serde_json::Map::len);
    HttpResponse::Ok().json(serde_json::json!({ "ok": true, "fields": fields }))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8099".to_owned());
    HttpServer::new(|| {
        App::new()
            .app_data(web::JsonConfig::default().limit(256 * 1024))
            .route("/api/devices/self/heartbeat", web::post().to(answer))
    })
    .bind(listen)?
    .run()
    .await
}
