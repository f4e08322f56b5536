//! The control groups of native workers: one group per worker, made under
//! the node's own group, holding the worker's memory and process-count
//! limits and counting its CPU time, and the way to kill and remove it.
//!
//! The kernel's interface to control groups is its file system
//! (`/sys/fs/cgroup`), so this is file reads and writes, no system calls of
//! our own. (`cgroups-rs` creates a group at the same path in every v1
//! hierarchy; here the memory group of the node is nested somewhere other
//! than its pids group, and a worker's group must sit under the node's own
//! in each, so that the node's limits still hold for its workers.)
//!
//! Version 2 is used where the node's own group is in a v2 hierarchy with
//! the `memory` and `pids` controllers; otherwise version 1 with the
//! `memory`, `pids` and `cpuacct` hierarchies.

use std::fs;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Where the control-group hierarchies of this machine are, as the node
/// found them at start.
#[derive(Clone, Debug)]
pub(crate) enum Hierarchy {
    /// Version 2: the directory under which workers' groups are made.
    V2 { parent: PathBuf },
    /// Version 1: the directories, one per controller, under which workers'
    /// groups are made.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpuacct: PathBuf,
    },
}

/// The limits a worker's group holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupLimits {
    pub(crate) memory_bytes: u64,
    pub(crate) processes: u32,
}

/// What a worker's group counted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Processes the kernel's out-of-memory killer killed in the group.
    pub(crate) oom_kills: u64,
    /// Forks refused because the group was at its process limit.
    pub(crate) pids_refused: u64,
    /// CPU time used by every process that ran in the group.
    pub(crate) cpu: Duration,
}

/// The control groups of one worker (one per v1 hierarchy, or one in v2).
#[derive(Debug)]
pub(crate) struct Group {
    version2: bool,
    /// In v1: memory, pids, cpuacct; in v2 the one group.
    dirs: Vec<PathBuf>,
}

/// The v1 controllers a worker's limits need, by the name of their
/// hierarchy.
const V1_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpuacct"];

impl Hierarchy {
    /// Finds the node's own control groups from `/proc/self/cgroup` and
    /// `/proc/self/mountinfo`, and makes (or reuses) a directory `name`
    /// under each, in which workers' groups will be made. With `root`, the
    /// groups are made under it instead: a v2 group (one with
    /// `cgroup.controllers`, e.g. one systemd delegated to the node, with
    /// no processes of its own), or a directory holding the v1 hierarchies
    /// as `root/<controller>`. The error says which controller is missing
    /// or unusable.
    pub(crate) fn find(name: &str, root: Option<&Path>) -> Result<Hierarchy, String> {
        if let Some(root) = root {
            if root.join("cgroup.controllers").exists() {
                return v2_under(name, root);
            }
            return v1_under(name, |ctrl| Some(root.join(ctrl)));
        }
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mounts = parse_mountinfo(&mounts);
        // Version 2 first: the node's group must have memory and pids.
        if let Some(path) = own_path(&own, "")
            && let Some(mount) = mounts.iter().find(|m| m.fstype == "cgroup2")
        {
            let dir = join_cgroup(&mount.point, &mount.root, &path);
            let controllers =
                fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
            if has("memory") && has("pids") {
                leave_for_leaf(&dir, std::process::id())?;
                return v2_under(name, &dir);
            }
        }
        v1_under(name, |ctrl| {
            let path = own_path(&own, ctrl)?;
            let mount = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == ctrl))?;
            Some(join_cgroup(&mount.point, &mount.root, &path))
        })
    }

    /// Which version this is, for sentences.
    pub(crate) fn describe(&self) -> String {
        match self {
            Hierarchy::V2 { parent } => format!("cgroup v2 under {}", parent.display()),
            Hierarchy::V1 { memory, .. } => {
                format!("cgroup v1 (memory under {})", memory.display())
            }
        }
    }

    /// The directories workers' groups are made in.
    pub(crate) fn parents(&self) -> Vec<PathBuf> {
        match self {
            Hierarchy::V2 { parent } => vec![parent.clone()],
            Hierarchy::V1 {
                memory,
                pids,
                cpuacct,
            } => vec![memory.clone(), pids.clone(), cpuacct.clone()],
        }
    }

    /// Makes the group `name` of one worker with `limits`.
    pub(crate) fn create(&self, name: &str, limits: GroupLimits) -> io::Result<Group> {
        let group = match self {
            Hierarchy::V2 { parent } => Group {
                version2: true,
                dirs: vec![parent.join(name)],
            },
            Hierarchy::V1 {
                memory,
                pids,
                cpuacct,
            } => Group {
                version2: false,
                dirs: vec![memory.join(name), pids.join(name), cpuacct.join(name)],
            },
        };
        let made = group.make(limits);
        if made.is_err() {
            group.remove();
        }
        made.map(|()| group)
    }
}

/// A v1 hierarchy with `name` made under the directory `dir_of` gives for
/// each controller.
fn v1_under(name: &str, dir_of: impl Fn(&str) -> Option<PathBuf>) -> Result<Hierarchy, String> {
    let mut dirs = Vec::new();
    for ctrl in V1_CONTROLLERS {
        let dir = dir_of(ctrl).ok_or_else(|| {
            format!(
                "no cgroup v2 with the memory and pids controllers, and no cgroup v1 {ctrl} \
                 controller for the node's own group"
            )
        })?;
        let parent = dir.join(name);
        make_dir(&parent).map_err(|e| {
            format!(
                "cannot make the cgroup v1 {ctrl} group {} for native workers: {e}",
                parent.display()
            )
        })?;
        let control = match ctrl {
            "memory" => "memory.limit_in_bytes",
            "pids" => "pids.max",
            _ => "cpuacct.usage",
        };
        if !parent.join(control).exists() {
            return Err(format!(
                "{} is not a cgroup v1 group with the {ctrl} controller (it has no {control})",
                parent.display()
            ));
        }
        dirs.push(parent);
    }
    let [memory, pids, cpuacct] = <[PathBuf; 3]>::try_from(dirs).expect("three controllers");
    Ok(Hierarchy::V1 {
        memory,
        pids,
        cpuacct,
    })
}

/// A v2 hierarchy with `name` made under the node's group `dir`, its
/// children given the memory and pids controllers.
fn v2_under(name: &str, dir: &Path) -> Result<Hierarchy, String> {
    let parent = dir.join(name);
    make_dir(&parent).map_err(|e| {
        format!(
            "cannot make the cgroup v2 group {} for native workers: {e}",
            parent.display()
        )
    })?;
    // The node's group must pass the controllers down to `parent`, and
    // `parent` to the workers' groups. (v2 refuses this for a group that has
    // processes of its own besides the root: a node started by systemd with
    // `Delegate=` has moved itself into a leaf first, `leave_for_leaf`.)
    for (at, what) in [(dir, "the node's group"), (&*parent, "the workers' group")] {
        fs::write(at.join("cgroup.subtree_control"), "+memory +pids").map_err(|e| {
            format!(
                "cannot give the memory and pids controllers to the children of {what} {} \
                 (cgroup v2; delegate the node a group of its own): {e}",
                at.display()
            )
        })?;
    }
    Ok(Hierarchy::V2 { parent })
}

/// The leaf of its own v2 group the node moves itself into (see
/// [`leave_for_leaf`]).
pub(crate) const NODE_LEAF: &str = "zorilla-node";

/// Moves this process (`me`), when it is the only one in its v2 group
/// `dir`, into the leaf [`NODE_LEAF`] of that group, and says whether it
/// did. A v2 group that holds processes cannot give controllers to its
/// children, so the node started by systemd with `Delegate=` (alone in its
/// unit's group, which systemd handed over to it) steps down into a leaf,
/// and its unit's group can then hold the workers' groups. A group that
/// holds other processes too is left as it is: moving the node alone would
/// not free it (and the error that follows says to delegate a group).
fn leave_for_leaf(dir: &Path, me: u32) -> Result<bool, String> {
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<&str> = procs.split_whitespace().collect();
    if pids != [me.to_string()] {
        return Ok(false);
    }
    let leaf = dir.join(NODE_LEAF);
    make_dir(&leaf)
        .and_then(|()| fs::write(leaf.join("cgroup.procs"), "0"))
        .map_err(|e| {
            format!(
                "cannot move the node into {} to free its cgroup v2 group for the workers' \
                 groups: {e}",
                leaf.display()
            )
        })?;
    Ok(true)
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// One cgroup mount of `/proc/self/mountinfo`.
struct Mount {
    /// The path of the hierarchy mounted (its root within the hierarchy).
    root: String,
    point: PathBuf,
    fstype: String,
    options: String,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let mut rest = after.split(' ');
            let fstype = rest.next()?;
            let _source = rest.next()?;
            let options = rest.next()?;
            if !fstype.starts_with("cgroup") {
                return None;
            }
            Some(Mount {
                root: unescape(fields.get(3)?),
                point: PathBuf::from(unescape(fields.get(4)?)),
                fstype: fstype.to_owned(),
                options: options.to_owned(),
            })
        })
        .collect()
}

/// Mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The node's own group in the hierarchy of `controller` ("" for v2).
fn own_path(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let ctrls = parts.next()?;
        let path = parts.next()?;
        let found = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        found.then(|| path.to_owned())
    })
}

/// The directory of group `path` in a hierarchy whose `root` is mounted at
/// `point`.
fn join_cgroup(point: &Path, root: &str, path: &str) -> PathBuf {
    let relative = path
        .strip_prefix(root)
        .unwrap_or(path)
        .trim_start_matches('/');
    if relative.is_empty() {
        point.to_path_buf()
    } else {
        point.join(relative)
    }
}

impl Group {
    fn make(&self, limits: GroupLimits) -> io::Result<()> {
        for dir in &self.dirs {
            match fs::create_dir(dir) {
                // A group of the same name left by an earlier node process
                // that had the same process id and was killed before it
                // could remove its groups: empty, so the kernel lets it go
                // (a group with processes in it stays, and this fails).
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    fs::remove_dir(dir)?;
                    fs::create_dir(dir)?;
                }
                other => other?,
            }
        }
        let memory = limits.memory_bytes.to_string();
        let processes = if limits.processes == u32::MAX {
            "max".to_owned()
        } else {
            limits.processes.to_string()
        };
        if self.version2 {
            let dir = &self.dirs[0];
            if limits.memory_bytes != u64::MAX {
                fs::write(dir.join("memory.max"), &memory)?;
                // No swap: the limit is on memory, not on memory in RAM.
                write_if_present(&dir.join("memory.swap.max"), "0")?;
            }
            // An out-of-memory kill takes the whole worker, as in v1 below.
            write_if_present(&dir.join("memory.oom.group"), "1")?;
            fs::write(dir.join("pids.max"), processes)?;
        } else {
            if limits.memory_bytes != u64::MAX {
                fs::write(self.dirs[0].join("memory.limit_in_bytes"), &memory)?;
                // Memory plus swap, where the kernel accounts swap.
                write_if_present(&self.dirs[0].join("memory.memsw.limit_in_bytes"), &memory)?;
            }
            fs::write(self.dirs[1].join("pids.max"), processes)?;
        }
        Ok(())
    }

    /// The `cgroup.procs` files a process writes `0` to, to join the group.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// What the group counted so far (a counter that cannot be read counts
    /// nothing).
    pub(crate) fn counters(&self) -> Counters {
        let read = |dir: &Path, file: &str| fs::read_to_string(dir.join(file)).unwrap_or_default();
        if self.version2 {
            let dir = &self.dirs[0];
            Counters {
                oom_kills: keyed(&read(dir, "memory.events"), "oom_kill"),
                pids_refused: keyed(&read(dir, "pids.events"), "max"),
                cpu: Duration::from_micros(keyed(&read(dir, "cpu.stat"), "usage_usec")),
            }
        } else {
            Counters {
                oom_kills: keyed(&read(&self.dirs[0], "memory.oom_control"), "oom_kill"),
                pids_refused: keyed(&read(&self.dirs[1], "pids.events"), "max"),
                cpu: Duration::from_nanos(
                    read(&self.dirs[2], "cpuacct.usage")
                        .trim()
                        .parse()
                        .unwrap_or(0),
                ),
            }
        }
    }

    /// The processes in the group now.
    pub(crate) fn processes(&self) -> Vec<i32> {
        // Every process of a worker is in all of its groups; pids (v1) or
        // the one group (v2) lists them.
        let dir = if self.version2 {
            &self.dirs[0]
        } else {
            &self.dirs[1]
        };
        fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Kills every process in the group and returns once none is left, or
    /// after `patience`; true if none is left.
    ///
    /// v2 has `cgroup.kill`. In v1 the list is read and killed until it is
    /// empty: a worker's processes are all in one PID namespace whose first
    /// process dies of the first round, which makes the kernel kill the
    /// rest, so later rounds only wait for the list to empty.
    pub(crate) fn kill_all(&self, patience: Duration) -> bool {
        if self.version2 {
            let _ = fs::write(self.dirs[0].join("cgroup.kill"), "1");
        }
        let started = std::time::Instant::now();
        loop {
            let left = self.processes();
            if left.is_empty() {
                return true;
            }
            if started.elapsed() > patience {
                return false;
            }
            for pid in left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Removes the group's directories (an empty group's only; the kernel
    /// refuses to remove one with processes).
    pub(crate) fn remove(&self) {
        for dir in &self.dirs {
            // A group whose last process just died can be busy a moment.
            for _ in 0..100 {
                match fs::remove_dir(dir) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    _ => break,
                }
            }
        }
    }
}

impl Drop for Group {
    /// A worker's task dropped before its end (its runtime shut down) still
    /// leaves nothing running and no group behind.
    fn drop(&mut self) {
        if self.dirs.iter().any(|d| d.exists()) {
            self.kill_all(Duration::from_secs(1));
            self.remove();
        }
    }
}

fn write_if_present(file: &Path, value: &str) -> io::Result<()> {
    if file.exists() {
        fs::write(file, value)?;
    }
    Ok(())
}

/// The number after `key` in a file of `key value` lines.
fn keyed(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|line| {
            let (k, v) = line.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_groups_and_mounts_are_read() {
        let own = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/de05\n2:cpuacct:/\n0::/\n";
        assert_eq!(
            own_path(own, "memory").as_deref(),
            Some("/process_api/de05")
        );
        assert_eq!(own_path(own, "pids").as_deref(), Some("/"));
        assert_eq!(own_path(own, "").as_deref(), Some("/"));
        assert_eq!(own_path(own, "blkio"), None);
        let mounts = parse_mountinfo(
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
             23 1 0:5 / /proc rw - proc proc rw\n",
        );
        assert_eq!(mounts.len(), 2);
        assert_eq!(
            join_cgroup(&mounts[0].point, &mounts[0].root, "/process_api/de05"),
            PathBuf::from("/sys/fs/cgroup/memory/process_api/de05")
        );
        assert_eq!(
            join_cgroup(Path::new("/sys/fs/cgroup"), "/", "/"),
            PathBuf::from("/sys/fs/cgroup")
        );
    }

    /// The v2 files a worker's group is made with and read from, in a
    /// directory that only looks like a delegated v2 group (these machines
    /// have v1; the real v1 path runs in `tests/native.rs`).
    #[test]
    fn a_v2_group_gets_its_limits_and_its_counters_are_read() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let hierarchy = Hierarchy::find("workers", Some(root.path())).unwrap();
        assert_eq!(hierarchy.parents(), vec![root.path().join("workers")]);
        let read = |p: PathBuf| fs::read_to_string(p).unwrap();
        assert_eq!(
            read(root.path().join("cgroup.subtree_control")),
            "+memory +pids"
        );
        let parent = root.path().join("workers");
        assert_eq!(read(parent.join("cgroup.subtree_control")), "+memory +pids");
        // What the kernel makes in a new group.
        let group = hierarchy
            .create(
                "w1",
                GroupLimits {
                    memory_bytes: 1 << 20,
                    processes: 18,
                },
            )
            .unwrap();
        let dir = parent.join("w1");
        assert_eq!(read(dir.join("memory.max")), "1048576");
        assert_eq!(read(dir.join("pids.max")), "18");
        assert_eq!(group.procs_files(), vec![dir.join("cgroup.procs")]);
        fs::write(
            dir.join("memory.events"),
            "low 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        fs::write(dir.join("pids.events"), "max 2\n").unwrap();
        fs::write(dir.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\n").unwrap();
        assert_eq!(
            group.counters(),
            Counters {
                oom_kills: 1,
                pids_refused: 2,
                cpu: Duration::from_micros(1500),
            }
        );
        assert!(group.processes().is_empty());
    }

    /// A node alone in its delegated group (its systemd unit's) moves into
    /// a leaf of it, so that the group may give controllers to the
    /// workers' groups; in a group it shares, or that another process
    /// already left, it stays where it is. (A directory that looks like a
    /// v2 group: the kernel would make the leaf's `cgroup.procs` itself.)
    #[test]
    fn a_node_alone_in_its_v2_group_moves_into_a_leaf_and_only_then() {
        let unit = tempfile::tempdir().unwrap();
        let leaf_procs = unit.path().join(NODE_LEAF).join("cgroup.procs");
        fs::write(unit.path().join("cgroup.procs"), "4242\n4243\n").unwrap();
        assert_eq!(leave_for_leaf(unit.path(), 4242), Ok(false));
        assert!(!unit.path().join(NODE_LEAF).exists());
        fs::write(unit.path().join("cgroup.procs"), "").unwrap();
        assert_eq!(leave_for_leaf(unit.path(), 4242), Ok(false));
        assert!(!unit.path().join(NODE_LEAF).exists());
        fs::write(unit.path().join("cgroup.procs"), "4242\n").unwrap();
        assert_eq!(leave_for_leaf(unit.path(), 4242), Ok(true));
        assert_eq!(fs::read_to_string(&leaf_procs).unwrap(), "0");
        // A node restarted in the same unit finds its leaf there already.
        fs::remove_file(&leaf_procs).unwrap();
        assert_eq!(leave_for_leaf(unit.path(), 4242), Ok(true));
        assert_eq!(fs::read_to_string(&leaf_procs).unwrap(), "0");
    }

    #[test]
    fn a_directory_without_controllers_is_refused_with_the_controller_named() {
        let root = tempfile::tempdir().unwrap();
        for ctrl in V1_CONTROLLERS {
            fs::create_dir(root.path().join(ctrl)).unwrap();
        }
        let err = Hierarchy::find("workers", Some(root.path())).unwrap_err();
        assert!(err.contains("with the memory controller"), "{err}");
    }

    #[test]
    fn counters_are_read_by_key() {
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(keyed(oom, "oom_kill"), 2);
        assert_eq!(keyed(oom, "oom_kill_disable"), 0);
        assert_eq!(keyed("max 7\n", "max"), 7);
        assert_eq!(keyed("", "max"), 0);
    }
}
