//! The helper that puts one native worker into its sandbox and runs it:
//! the program `zorilla-native-init` (or the node's own binary, calling
//! [`init_main`] first thing in `main`).
//!
//! Why a helper: the node is a multi-threaded tokio program, and between
//! `fork` and `exec` such a program may only make async-signal-safe calls;
//! Landlock's and seccompiler's builders allocate, mounts want paths built
//! at run time, user-namespace maps need a second process. So the node only
//! spawns this helper (a plain `Command`, nothing run between fork and exec)
//! and the helper, single-threaded from its first instruction, does the
//! rest in ordinary code, each step a function whose error says which
//! mechanism failed.
//!
//! Three processes:
//!
//! 1. The helper (H), still root in the machine's namespaces, joins the
//!    worker's control groups (so everything after is counted and
//!    limited), makes a PID namespace for its children and forks C.
//! 2. C is process 1 of that namespace. It makes its mount (and IPC)
//!    namespace and builds the worker's root: a small tmpfs with the job
//!    directory at `/job`, the owner's read-only paths, `/proc` of the new
//!    PID namespace, a few devices, tmpfs `/tmp` and `/dev/shm`. It then
//!    makes its user namespace; H (outside) writes its id maps (one id,
//!    `inside_id` inside for `outside_id` outside: never root inside). C
//!    takes that identity, drops every capability, asks to be killed with
//!    H, applies Landlock, sets no-new-privileges and the seccomp filter,
//!    and starts G.
//! 3. G runs the job's program, in `/job`, with the job's environment.
//!
//! C reaps every process of the namespace and, when G ends, reports how on
//! the status pipe (the helper's standard input, see [`Status`]) and
//! exits, which makes the kernel kill whatever is left in the namespace.
//! Killing H (the node's cancel) kills C through its parent-death signal,
//! and with it the namespace; the node also kills what is left in the
//! worker's control groups.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::libc;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, pipe2};

use super::plan::Plan;
use super::{landlock, seccomp};

/// How a worker ended, as C reports it to the node: one line on the status
/// pipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// The program exited with this status.
    Exited(i32),
    /// The program was killed by this signal.
    Signalled(i32),
    /// The sandbox could not be set up or the program not started.
    Error(String),
}

impl Status {
    fn line(&self) -> String {
        match self {
            Status::Exited(code) => format!("exited {code}\n"),
            Status::Signalled(signal) => format!("signal {signal}\n"),
            Status::Error(why) => format!("error {}\n", why.replace('\n', " ")),
        }
    }

    /// The first status line of what the helper wrote.
    pub(crate) fn parse(text: &str) -> Option<Status> {
        let line = text.lines().next()?;
        let (kind, rest) = line.split_once(' ')?;
        match kind {
            "exited" => rest.parse().ok().map(Status::Exited),
            "signal" => rest.parse().ok().map(Status::Signalled),
            "error" => Some(Status::Error(rest.to_owned())),
            _ => None,
        }
    }
}

/// Runs the helper with the process's arguments after `argv[0]` and exits.
///
/// Must be called while the process has only one thread (first thing in
/// `main`): it forks.
pub fn init_main() -> ! {
    init_main_with(std::env::args_os().skip(1))
}

/// Runs the helper with these arguments (those the node passed after its
/// own prefix) and exits.
pub fn init_main_with(args: impl IntoIterator<Item = OsString>) -> ! {
    // The status pipe is the helper's standard input; the job gets
    // /dev/null there instead.
    let status = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .ok();
    let result = Plan::from_args(args)
        .map_err(|e| format!("bad helper arguments: {e}"))
        .and_then(|plan| helper(&plan, status.as_ref()));
    if let (Err(why), Some(mut status)) = (result, status.as_ref()) {
        let _ = status.write_all(Status::Error(why).line().as_bytes());
        std::process::exit(1);
    }
    std::process::exit(0)
}

/// H: joins the groups, makes the PID namespace, starts C, maps its ids,
/// waits for it.
fn helper(plan: &Plan, status: Option<&File>) -> Result<(), String> {
    for procs in &plan.cgroups {
        fs::write(procs, "0").map_err(|e| format!("cannot join {}: {e}", procs.display()))?;
    }
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| format!("cannot make a PID namespace: {e}"))?;
    let (ready_r, ready_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
    let (go_r, go_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
    // SAFETY: the helper has one thread (see `init_main`), so the child's
    // copy of the process is consistent and may run ordinary code.
    #[allow(unsafe_code)]
    let forked = unsafe { nix::unistd::fork() }.map_err(|e| format!("cannot fork: {e}"))?;
    let child = match forked {
        ForkResult::Child => {
            drop((ready_r, go_w));
            let end = worker(plan, ready_w, go_r);
            if let Some(mut status) = status {
                let _ = status.write_all(end.line().as_bytes());
            }
            std::process::exit(i32::from(matches!(end, Status::Error(_))));
        }
        ForkResult::Parent { child } => child,
    };
    drop((ready_w, go_r));
    let mut byte = [0u8; 1];
    if File::from(ready_r).read(&mut byte).unwrap_or(0) == 1 {
        if let Err(why) = map_ids(child, plan) {
            let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
            let _ = waitpid(child, None);
            return Err(why);
        }
        let mut go = File::from(go_w);
        let _ = go.write_all(b"g");
        // `go` stays open until H exits: C sees H's death as its end.
        wait_for(child);
        drop(go);
    } else {
        // C failed before its user namespace and said why itself.
        wait_for(child);
    }
    Ok(())
}

fn wait_for(child: Pid) {
    loop {
        match waitpid(child, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return,
        }
    }
}

/// Writes C's id maps from outside its user namespace (only a process with
/// `CAP_SETUID` in the parent namespace may map an id other than its own).
fn map_ids(child: Pid, plan: &Plan) -> Result<(), String> {
    let proc = PathBuf::from(format!("/proc/{child}"));
    let map = format!("{} {} 1\n", plan.inside_id, plan.outside_id);
    let write = |file: &str, text: &str| {
        fs::write(proc.join(file), text)
            .map_err(|e| format!("user namespace: cannot write {file}: {e}"))
    };
    write("setgroups", "deny")?;
    write("uid_map", &map)?;
    write("gid_map", &map)
}

/// C: everything inside the namespaces; returns how the job ended.
fn worker(plan: &Plan, ready: OwnedFd, go: OwnedFd) -> Status {
    match sandbox(plan, ready, &go) {
        Err(why) => Status::Error(why),
        Ok(()) if plan.probe => Status::Exited(0),
        Ok(()) => run(plan),
    }
}

/// C's steps up to starting the job.
fn sandbox(plan: &Plan, ready: OwnedFd, go: &OwnedFd) -> Result<(), String> {
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)
        .map_err(|e| format!("cannot make a mount namespace: {e}"))?;
    build_root(plan).map_err(|e| format!("mounts: {e}"))?;
    nix::unistd::setgroups(&[]).map_err(|e| format!("cannot clear groups: {e}"))?;
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| format!("cannot make a user namespace: {e}"))?;
    File::from(ready)
        .write_all(b"r")
        .map_err(|e| format!("user namespace: {e}"))?;
    let mut byte = [0u8; 1];
    if File::from(go.try_clone().map_err(|e| e.to_string())?)
        .read(&mut byte)
        .unwrap_or(0)
        != 1
    {
        return Err("user namespace: the helper could not map the worker's ids".into());
    }
    become_worker(plan.inside_id)?;
    // Asked only now: a change of identity clears the parent-death signal.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| format!("cannot set the parent-death signal: {e}"))?;
    // Not dumpable (a change of identity already made it so; said here
    // because it matters): the job, of the same identity, cannot reach
    // this process's status pipe or memory through /proc.
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("cannot be undumpable: {e}"))?;
    if helper_gone(go) {
        return Err("the helper ended".into());
    }
    // No core files in the job directory.
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(|e| format!("cannot limit core files: {e}"))?;
    let read_only: Vec<&Path> = plan.read_only.iter().map(PathBuf::as_path).collect();
    landlock::restrict(&read_only)?;
    // seccompiler sets no-new-privileges before it installs the filter.
    seccomp::install()
}

/// Takes the worker's identity and drops every capability.
fn become_worker(id: u32) -> Result<(), String> {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which the
    // change of identity may take away.
    caps::clear(None, caps::CapSet::Bounding).map_err(|e| format!("capabilities: {e}"))?;
    let (uid, gid) = (Uid::from_raw(id), Gid::from_raw(id));
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("cannot take group {id}: {e}"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("cannot take user {id}: {e}"))?;
    for set in [
        caps::CapSet::Ambient,
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("capabilities: {e}"))?;
    }
    Ok(())
}

/// Whether H has ended (its end of the `go` pipe is closed).
fn helper_gone(go: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(go.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
        Err(_) => true,
    }
}

/// Starts G and reaps every process of the namespace until G ends.
fn run(plan: &Plan) -> Status {
    let child = Command::new(&plan.exe)
        .args(&plan.args)
        .current_dir("/job")
        .stdin(Stdio::null())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(e) => return Status::Error(format!("cannot run {}: {e}", plan.exe.display())),
    };
    let job = Pid::from_raw(child.id() as i32);
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == job => return Status::Exited(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == job => {
                return Status::Signalled(signal as i32);
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Status::Error(format!("cannot wait for the job: {e}")),
        }
    }
}

/// What the worker sees at a read-only path.
enum Shown {
    /// A directory or file of the host, open so that it can be mounted after
    /// the host path is hidden.
    Open(File, bool),
    /// A symbolic link, made again with the same target (on merged-/usr
    /// systems /bin, /lib and /lib64 are links into /usr).
    Link(PathBuf),
}

/// Builds the worker's root on a tmpfs mounted at `/tmp` (of this mount
/// namespace only) and makes it the root.
fn build_root(plan: &Plan) -> Result<(), String> {
    let none = None::<&str>;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(|e| format!("cannot make / private: {e}"))?;
    // Open everything to show before the stage hides part of the host.
    let job = open_path(&plan.job_dir)
        .map_err(|e| format!("job directory {}: {e}", plan.job_dir.display()))?;
    let mut shown = Vec::new();
    for path in &plan.read_only {
        let Ok(meta) = fs::symlink_metadata(path) else {
            continue;
        };
        let what = if meta.file_type().is_symlink() {
            Shown::Link(fs::read_link(path).map_err(|e| format!("{}: {e}", path.display()))?)
        } else {
            Shown::Open(
                open_path(path).map_err(|e| format!("{}: {e}", path.display()))?,
                meta.is_dir(),
            )
        };
        shown.push((path, what));
    }
    let stage = Path::new("/tmp");
    tmpfs(stage, "mode=0755,size=1m", MsFlags::empty())?;
    for (path, what) in shown {
        let at = stage.join(path.strip_prefix("/").unwrap_or(path));
        if let Some(parent) = at.parent() {
            mkdirs(parent)?;
        }
        match what {
            Shown::Link(target) => {
                symlink(&target, &at).map_err(|e| format!("{}: {e}", at.display()))?
            }
            Shown::Open(file, dir) => {
                bind(&fd_path(&file), &at, dir)?;
                remount(&at, MsFlags::MS_RDONLY)?;
            }
        }
    }
    let job_at = stage.join("job");
    bind(&fd_path(&job), &job_at, true)?;
    remount(&job_at, MsFlags::empty())?;
    let tmp_size = format!("mode=1777,size={}", plan.tmp_bytes.max(4096));
    tmpfs(&stage.join("tmp"), &tmp_size, MsFlags::MS_NODEV)?;
    let dev = stage.join("dev");
    tmpfs(&dev, "mode=0755,size=64k", MsFlags::MS_NOEXEC)?;
    for device in ["null", "zero", "full", "random", "urandom"] {
        bind(&Path::new("/dev").join(device), &dev.join(device), false)?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(target, dev.join(name)).map_err(|e| format!("/dev/{name}: {e}"))?;
    }
    tmpfs(
        &dev.join("shm"),
        &tmp_size,
        MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
    )?;
    let proc = stage.join("proc");
    mkdirs(&proc)?;
    // This process is the first of the new PID namespace: the new /proc
    // shows that namespace only.
    mount(
        Some("proc"),
        &proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        none,
    )
    .map_err(|e| format!("cannot mount /proc: {e}"))?;
    // Make the stage the root and drop the host's.
    nix::unistd::chdir(stage).map_err(|e| format!("chdir: {e}"))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("cannot drop the host's root: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| format!("chdir: {e}"))?;
    remount(Path::new("/"), MsFlags::MS_RDONLY)?;
    Ok(())
}

fn open_path(path: &Path) -> std::io::Result<File> {
    File::options()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
}

fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

fn mkdirs(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

fn tmpfs(at: &Path, options: &str, flags: MsFlags) -> Result<(), String> {
    mkdirs(at)?;
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | flags,
        Some(options),
    )
    .map_err(|e| format!("cannot mount a tmpfs at {}: {e}", at.display()))
}

/// Binds `from` at `at` (made as a directory or an empty file), without the
/// mounts beneath `from`.
fn bind(from: &Path, at: &Path, dir: bool) -> Result<(), String> {
    if dir {
        mkdirs(at)?;
    } else {
        File::create(at).map_err(|e| format!("{}: {e}", at.display()))?;
    }
    mount(Some(from), at, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| format!("cannot bind {} at {}: {e}", from.display(), at.display()))
}

/// Sets a bind mount's flags: never set-user-id programs or devices, and
/// `extra`.
fn remount(at: &Path, extra: MsFlags) -> Result<(), String> {
    mount(
        None::<&str>,
        at,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | extra,
        None::<&str>,
    )
    .map_err(|e| format!("cannot remount {}: {e}", at.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_back() {
        for status in [
            Status::Exited(3),
            Status::Signalled(9),
            Status::Error("mounts: cannot mount /proc: EPERM".into()),
        ] {
            assert_eq!(Status::parse(&status.line()), Some(status));
        }
        assert_eq!(Status::parse(""), None);
        assert_eq!(Status::parse("nonsense"), None);
    }
}
