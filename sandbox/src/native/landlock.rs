//! The Landlock rules of native workers: what a worker may do with files,
//! by path beneath, on top of what its mount namespace shows it. It may
//! write only its job directory, its `/tmp` and `/dev/shm`, read and run
//! the owner's read-only paths, read `/proc` (its own PID namespace's) and
//! use the few devices every program expects. Signals may only go to
//! processes of the same sandbox, and abstract Unix sockets (which the
//! mount namespace cannot hide: they live in the network namespace, which
//! workers share with the machine for MPI) only be reached if the sandbox
//! made them (both on kernels with Landlock ABI 6).
//!
//! The mount namespace already hides everything else; Landlock holds even
//! if a mount were wrong, and covers what mounts cannot (a read-only path
//! whose files are writable by the worker's identity is still read-only).

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

/// The newest Landlock ABI whose rights this sandbox was written and tested
/// against; newer kernels are used at this level.
const ABI_USED: ABI = ABI::V6;

/// Whether this kernel enforces Landlock's file rules.
pub(crate) fn probe() -> Result<(), String> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .map(drop)
        .map_err(|e| format!("Landlock is not available in this kernel: {e}"))
}

/// Restricts the calling thread (and what it starts) to the worker's rules.
/// `read_only` are paths as the worker sees them; those that do not exist
/// are skipped.
pub(crate) fn restrict(read_only: &[&Path]) -> Result<(), String> {
    let all = AccessFs::from_all(ABI_USED);
    let read = AccessFs::from_read(ABI_USED);
    let file = AccessFs::from_file(ABI_USED);
    let mut rules: Vec<(&Path, BitFlags<AccessFs>)> = vec![
        (Path::new("/job"), all),
        (Path::new("/tmp"), all),
        (Path::new("/dev/shm"), all),
        (Path::new("/proc"), read),
        (Path::new("/dev/null"), file),
        (Path::new("/dev/zero"), file),
        (Path::new("/dev/full"), file),
        (Path::new("/dev/random"), read & file),
        (Path::new("/dev/urandom"), read & file),
    ];
    rules.extend(read_only.iter().map(|p| (*p, read)));
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .and_then(|r| r.create())
        .map_err(|e| format!("landlock: {e}"))?;
    for (path, access) in rules {
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            // A listed path this machine does not have (e.g. /lib64).
            Err(_) if !path.exists() => continue,
            Err(e) => return Err(format!("landlock: {}: {e}", path.display())),
        };
        // A rule for a file takes only the rights that apply to files.
        let access = if path.is_dir() { access } else { access & file };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("landlock: {}: {e}", path.display()))?;
    }
    let status = ruleset
        .restrict_self()
        .map_err(|e| format!("landlock: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("landlock: the kernel enforces none of the rules".into());
    }
    Ok(())
}
