//! The reduced Linux backend's filesystem and IPC rules: Landlock with an explicit ABI.
//!
//! The launcher applies them to itself before it starts the program. Requested: every
//! filesystem right of ABI V6 handled (read, write, execute, create, rename across folders,
//! truncate, device ioctls), TCP bind and connect handled when the network is off (ABI V4),
//! and both scopes of ABI V6 (signals and abstract Unix sockets stay inside the sandbox). The
//! crate's best-effort mode is used only to learn what the kernel could not enforce: anything
//! less than fully enforced lowers the reported strength (see `probe_landlock`).

use std::path::PathBuf;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The ABI whose rights are requested. Raise it only together with the escape tests.
pub const TARGET_ABI: ABI = ABI::V6;

/// What applying the rules achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `full`, `partial` or `none`.
    pub status: &'static str,
    pub no_new_privs: bool,
    /// The kernel's ABI, when Landlock is available.
    pub kernel_abi: Option<i32>,
}

/// Restricts the calling thread (and everything it starts) to `read`, `write` and `devices`.
///
/// # Errors
/// When the ruleset cannot be built or applied.
pub fn apply(
    read: &[PathBuf],
    write: &[PathBuf],
    devices: &[PathBuf],
    deny_network: bool,
) -> Result<Applied, String> {
    let abi = TARGET_ABI;
    let all = AccessFs::from_all(abi);
    let read_access = AccessFs::from_read(abi) | AccessFs::Execute;
    // Everything but making device nodes, and no ioctls on devices found in the work folder.
    let write_access: BitFlags<AccessFs> =
        all & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev);
    let device_access: BitFlags<AccessFs> = AccessFs::ReadFile
        | AccessFs::WriteFile
        | AccessFs::Truncate
        | AccessFs::IoctlDev
        | AccessFs::ReadDir;
    let err = |err: landlock::RulesetError| format!("landlock: {err}");

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?
        .scope(Scope::from_all(abi))
        .map_err(err)?;
    if deny_network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    for (paths, access) in [
        (read, read_access),
        (write, write_access),
        (devices, device_access),
    ] {
        for path in paths {
            // A path that vanished since the agent listed it is simply not granted.
            let Ok(fd) = PathFd::new(path) else {
                continue;
            };
            let access = if path.is_dir() {
                access
            } else {
                access & AccessFs::from_file(abi)
            };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err)?;
        }
    }
    let status = created.restrict_self().map_err(err)?;
    let kernel_abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => Some(kernel_abi.unwrap_or(effective_abi as i32)),
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => None,
    };
    Ok(Applied {
        status: match status.ruleset {
            RulesetStatus::FullyEnforced => "full",
            RulesetStatus::PartiallyEnforced => "partial",
            RulesetStatus::NotEnforced => "none",
        },
        no_new_privs: status.no_new_privs,
        kernel_abi,
    })
}
