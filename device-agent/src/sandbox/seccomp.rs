//! The seccomp filter the launcher applies to itself (and so to everything it starts).
//!
//! Always denied (EPERM): `ptrace`, `process_vm_readv/writev`, `io_uring_*`, namespaces
//! (`unshare`, `setns`, `clone` with a `CLONE_NEW*` flag), `mount` and friends, kernel keyrings,
//! `bpf`, `perf_event_open`, `userfaultfd`, module loading, `reboot`, `kexec`, clock setting,
//! swap, `chroot`, and the terminal injection ioctls `TIOCSTI` and `TIOCLINUX` (compared on
//! the low 32 bits, as the kernel reads them). `clone3` gets ENOSYS, so the C library falls
//! back to `clone`, whose flags a filter can read.
//!
//! With the network off and no network namespace around (Landlock), also denied: sockets of
//! any family but Unix, and `connect`, `sendmsg`, `sendmmsg` and `sendto` with an address, so a
//! pathname Unix socket outside (a Docker or D-Bus socket) cannot be reached either.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `ioctl` requests that push input into a terminal or read its screen.
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// Builds and applies the filters to the calling thread (and what it starts later).
///
/// # Errors
/// When the architecture is unknown or the kernel refuses the filter.
pub fn apply(deny_network: bool) -> Result<(), String> {
    let arch = arch()?;
    let (enosys, eperm) = filters(arch, deny_network)?;
    for program in [enosys, eperm] {
        seccompiler::apply_filter(&program).map_err(|err| format!("seccomp: {err}"))?;
    }
    Ok(())
}

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|err| format!("seccomp: {err:?}"))
}

/// The two programs: `clone3` → ENOSYS, the rest → EPERM.
fn filters(arch: TargetArch, deny_network: bool) -> Result<(BpfProgram, BpfProgram), String> {
    let mut enosys_rules = BTreeMap::new();
    enosys_rules.insert(libc::SYS_clone3, Vec::new());
    let enosys = SeccompFilter::new(
        enosys_rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|err| format!("seccomp: {err}"))?;

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for syscall in always_denied() {
        rules.insert(syscall, Vec::new());
    }
    let condition = |arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, len, op, value).map_err(|err| format!("seccomp: {err}"))
    };
    let rule = |conditions: Vec<SeccompCondition>| {
        SeccompRule::new(conditions).map_err(|err| format!("seccomp: {err}"))
    };
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![condition(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                TIOCSTI,
            )?])?,
            rule(vec![condition(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                TIOCLINUX,
            )?])?,
        ],
    );
    let clone_flags_arg = 0;
    let mut clone_rules = Vec::new();
    for flag in CLONE_NAMESPACE_FLAGS {
        clone_rules.push(rule(vec![condition(
            clone_flags_arg,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(*flag),
            *flag,
        )?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    if deny_network {
        let not_unix = |arg| {
            condition(
                arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )
        };
        rules.insert(libc::SYS_socket, vec![rule(vec![not_unix(0)?])?]);
        rules.insert(libc::SYS_socketpair, vec![rule(vec![not_unix(0)?])?]);
        rules.insert(libc::SYS_connect, Vec::new());
        rules.insert(libc::SYS_sendmsg, Vec::new());
        rules.insert(libc::SYS_sendmmsg, Vec::new());
        rules.insert(
            libc::SYS_sendto,
            vec![rule(vec![condition(
                4,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::Ne,
                0,
            )?])?],
        );
    }
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|err| format!("seccomp: {err}"))?;
    let enosys: BpfProgram = enosys
        .try_into()
        .map_err(|err| format!("seccomp: {err:?}"))?;
    let eperm: BpfProgram = eperm
        .try_into()
        .map_err(|err| format!("seccomp: {err:?}"))?;
    Ok((enosys, eperm))
}

fn always_denied() -> Vec<i64> {
    let mut denied = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_pidfd_getfd,
        libc::SYS_kcmp,
    ];
    #[cfg(target_arch = "x86_64")]
    denied.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_uselib]);
    denied
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        let arch = arch().unwrap_or_else(|err| panic!("{err}"));
        for deny_network in [false, true] {
            let (enosys, eperm) = filters(arch, deny_network).unwrap_or_else(|err| panic!("{err}"));
            assert!(!enosys.is_empty() && eperm.len() > enosys.len());
        }
    }
}
