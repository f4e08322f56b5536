//! The system-call filter of native workers: calls a job has no business
//! making fail with `EPERM` (the program sees an ordinary error and can say
//! so, instead of dying of `SIGSYS`); everything else is allowed.
//!
//! This is a deny list on top of the other walls, not the only wall: the
//! worker has no capabilities, so most of these calls would fail anyway. The
//! filter removes the kernel code behind them from what a job can reach
//! (new namespaces, BPF, keyrings, io_uring and perf are where the kernel's
//! local privilege escalations keep being found). Built with Firecracker's
//! `seccompiler`, which also refuses calls from a foreign architecture.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// Calls refused outright.
const REFUSED: &[(i64, &str)] = &[
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_process_vm_readv, "process_vm_readv"),
    (libc::SYS_process_vm_writev, "process_vm_writev"),
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_chroot, "chroot"),
    (libc::SYS_open_tree, "open_tree"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_fsopen, "fsopen"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (libc::SYS_unshare, "unshare"),
    (libc::SYS_setns, "setns"),
    (libc::SYS_init_module, "init_module"),
    (libc::SYS_finit_module, "finit_module"),
    (libc::SYS_delete_module, "delete_module"),
    (libc::SYS_kexec_load, "kexec_load"),
    (libc::SYS_kexec_file_load, "kexec_file_load"),
    (libc::SYS_reboot, "reboot"),
    (libc::SYS_swapon, "swapon"),
    (libc::SYS_swapoff, "swapoff"),
    (libc::SYS_bpf, "bpf"),
    (libc::SYS_perf_event_open, "perf_event_open"),
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    (libc::SYS_userfaultfd, "userfaultfd"),
    (libc::SYS_io_uring_setup, "io_uring_setup"),
    (libc::SYS_io_uring_enter, "io_uring_enter"),
    (libc::SYS_io_uring_register, "io_uring_register"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    (libc::SYS_acct, "acct"),
    (libc::SYS_quotactl, "quotactl"),
    (libc::SYS_syslog, "syslog"),
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_clock_settime, "clock_settime"),
    (libc::SYS_clock_adjtime, "clock_adjtime"),
    (libc::SYS_adjtimex, "adjtimex"),
    (libc::SYS_vhangup, "vhangup"),
    (libc::SYS_personality, "personality"),
    (libc::SYS_lookup_dcookie, "lookup_dcookie"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_iopl, "iopl"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_ioperm, "ioperm"),
];

/// `clone` flags that make new namespaces: refused like `unshare`.
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The names of the refused calls, for documentation and tests.
pub fn refused_calls() -> impl Iterator<Item = &'static str> {
    REFUSED.iter().map(|(_, name)| *name)
}

/// The filters to install, in order: the deny list (`EPERM`), then
/// `clone3` answered with `ENOSYS`. `clone3` passes its flags in memory a
/// filter cannot read, so it is refused as "not implemented", which makes
/// the C library fall back to `clone`, whose flags the first filter checks.
/// (Two filters, because a filter has one action for all it matches; the
/// kernel runs both.)
pub(crate) fn filters() -> Result<Vec<BpfProgram>, String> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: this architecture is not supported: {e}"))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|(nr, _)| (*nr, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flags_arg = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?;
            SeccompRule::new(vec![flags_arg])
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("seccomp: {e}"))?;
    rules.insert(libc::SYS_clone, clone_rules);
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    [deny, clone3]
        .into_iter()
        .map(|f| BpfProgram::try_from(f).map_err(|e| format!("seccomp: {e}")))
        .collect()
}

/// Installs the filters on the calling thread (which sets no-new-privs
/// first, as the kernel requires of a process without `CAP_SYS_ADMIN`).
pub(crate) fn install() -> Result<(), String> {
    for filter in filters()? {
        seccompiler::apply_filter(&filter).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        let filters = filters().unwrap();
        assert_eq!(filters.len(), 2);
        assert!(filters[0].len() > REFUSED.len());
        assert!(refused_calls().any(|c| c == "ptrace"));
    }
}
