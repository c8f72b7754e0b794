//! What this computer keeps on its own disk, in the data dir (mode 0700, every file 0600 and
//! written atomically through [`state`]):
//!
//! - [`state`]: the data dir itself, `config.json` (server, device, folders, recipes,
//!   engines, trusted folders, the approvals and evidence switches) and the device token;
//! - [`token_store`]: where the device token rests, the OS keyring or its 0600 file
//!   (`TETHER_TOKEN_STORE`);
//! - [`folders`], [`recipes`], [`acp_engines`]: what the owner shares, by label and by name;
//! - [`seal_key`]: the device's P-256 key pair, the private half encrypted under the local
//!   key;
//! - [`vault`]: the saved secrets, encrypted under the local key;
//! - [`github`]: the GitHub tokens pull requests are opened with, encrypted under the local
//!   key and kept apart from the secrets;
//! - [`encrypted_file`]: how those two files are loaded, changed and stored;
//! - [`journal`]: the runs this computer holds or has yet to report, and the folder each
//!   recent job used;
//! - [`decisions`]: the questions runs wait on, and the answers given on the computer;
//! - [`sessions`]: the ACP session each recent job ran in, for follow-ups and carry-ons;
//! - [`engine_checks`]: the last `engine check` of each ACP engine;
//! - [`presets`]: the coding agents Tether knows how to set up (`engine add --preset`);
//! - [`origins`]: the endpoints (scheme, host, port) an engine limited to its model may reach;
//! - [`evidence_files`]: the checks an evidence file passes before its bytes leave;
//!   [`held_evidence`]: the files held for their owner, their index and how long they stay;
//! - [`private_files`]: the file primitives every wing shares (private folders, modes,
//!   opening without following a link, hex).
//!
//! **Architecture Invariant:** nothing here talks to the server or runs anything; every
//! other wing reads this computer's configuration from here, and the server's word never
//! becomes a path or a program without going through it.

pub mod acp_engines;
pub mod decisions;
pub mod encrypted_file;
pub mod engine_checks;
pub mod evidence_files;
pub mod folders;
pub mod github;
pub mod held_evidence;
pub mod journal;
pub mod origins;
pub mod presets;
pub mod private_files;
pub mod recipes;
pub mod seal_key;
pub mod sessions;
pub mod state;
pub mod token_store;
pub mod vault;
