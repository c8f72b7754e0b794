//! The API test suite: every test runs against SQLite and PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/external.rs"]
mod external;
#[path = "../support/postgres.rs"]
mod postgres;
#[path = "../support/redis.rs"]
mod redis;

mod helpers;

mod app_shell;
mod attachments;
mod auth;
mod computers_page;
mod console;
mod csrf;
mod decisions;
mod delivery;
mod delivery_page;
mod devices;
mod edge;
mod engine_sessions;
mod events;
mod evidence;
mod files;
mod follow_ups;
mod held_evidence;
mod hostile;
mod idempotency;
mod job_log;
mod job_page;
mod job_stream;
mod jobs;
mod leases;
mod limits;
mod logs;
mod migrations;
mod openapi;
mod operations;
mod pages;
mod pairing;
mod passkeys;
mod proxies;
mod push;
mod races;
mod recovery;
mod replicas;
mod secrets;
mod sessions;
mod spaces;
mod spaces_pages;
mod task_context;
mod tenancy;
mod text;
mod tokens;
mod worker_report;
