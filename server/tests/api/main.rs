//! The API test suite: every test runs against SQLite and PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/postgres.rs"]
mod postgres;

mod helpers;

mod auth;
mod devices;
mod hostile;
mod jobs;
mod leases;
mod pages;
mod pairing;
mod tenancy;
