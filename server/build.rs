//! `sqlx::migrate!` embeds `../migrations` when the crate compiles; without this a new
//! migration file would not rebuild the server.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
