//! Tests of `deploy/`: the systemd unit passes `systemd-analyze verify` and
//! stays hardened, the daemon speaks systemd's readiness protocol, the
//! example config parses and documents every option, and `install.sh`
//! installs into a root directory, twice without harm.
//!
//! `systemd-analyze` is required, not optional: these tests fail with an
//! install hint when it is missing (scripts/install-test-deps.sh installs
//! it), so that a broken unit cannot pass by being skipped.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use zorilla_node::Daemon;
use zorilla_node::config::Config;

const NODE: &str = env!("CARGO_BIN_EXE_zorilla-node");
/// The path the shipped unit starts the daemon from.
const UNIT_EXEC: &str = "ExecStart=/usr/local/bin/zorilla-node ";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn deploy(file: &str) -> PathBuf {
    repo().join("deploy").join(file)
}

fn systemd_analyze(args: &[&str]) -> Output {
    match Command::new("systemd-analyze").args(args).output() {
        Ok(output) => output,
        Err(e) => panic!(
            "cannot run systemd-analyze ({e}): install it with `apt-get install systemd` \
             (scripts/install-test-deps.sh does)"
        ),
    }
}

/// Writes `unit` to `dir/zorilla-node.service` with its ExecStart binary
/// replaced by `binary` (verify refuses a unit whose binary is missing),
/// and returns the copy's path.
fn unit_copy(unit: &str, binary: &Path, dir: &Path) -> PathBuf {
    assert!(
        unit.contains(UNIT_EXEC),
        "the unit no longer has {UNIT_EXEC}"
    );
    let text = unit.replace(
        UNIT_EXEC,
        &format!("ExecStart={} ", binary.to_str().unwrap()),
    );
    let path = dir.join("zorilla-node.service");
    std::fs::write(&path, text).unwrap();
    path
}

/// `systemd-analyze verify`: it exits 0 even for an unknown key or a
/// setting in the wrong section (it only warns), so any message about the
/// unit counts as a failure too.
fn assert_verifies(unit: &Path) {
    let out = systemd_analyze(&["verify", unit.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("zorilla-node"))
        .collect();
    assert!(
        out.status.success() && about_unit.is_empty(),
        "systemd-analyze verify {}: {}\n{stderr}",
        unit.display(),
        out.status
    );
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(deploy("zorilla-node.service")).unwrap();
    assert_verifies(&unit_copy(&unit, Path::new(NODE), dir.path()));
}

/// The hardening cannot erode unnoticed: systemd's own exposure score
/// (0 = fully locked down, 10 = none) must stay at most 2.0. Nor can it
/// grow into what the node needs (none of which a test outside systemd
/// would catch): W+X memory for wasmtime's compiler, netlink for the
/// overlay's interface watching, /proc/meminfo for the memory it offers.
#[test]
fn the_unit_stays_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(deploy("zorilla-node.service")).unwrap();
    let copy = unit_copy(&unit, Path::new(NODE), dir.path());
    let out = systemd_analyze(&[
        "security",
        "--offline=true",
        "--threshold=20",
        copy.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let overall = stdout
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or("(no overall exposure line)");
    assert!(
        out.status.success(),
        "exposure above 2.0: {overall}\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needed in [
        "MemoryDenyWriteExecute=",
        "RestrictAddressFamilies=~AF_NETLINK",
        "ProcSubset=",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.contains(&format!(" {needed} ")))
            .unwrap_or_else(|| panic!("no {needed} line in\n{stdout}"));
        assert!(
            line.starts_with('✗'),
            "the unit forbids what the node needs ({needed}):\n{line}"
        );
    }
}

/// Reads datagrams from the notify socket until one contains `field`, or
/// panics at the deadline (or if the node exits first).
fn wait_notify(sock: &UnixDatagram, child: &mut std::process::Child, field: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            Instant::now() < deadline,
            "no {field} from the node within 60 s"
        );
        match sock.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                if msg.lines().any(|l| l == field) {
                    return msg;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("the node exited ({status}) before sending {field}");
                }
            }
            Err(e) => panic!("notify socket: {e}"),
        }
    }
}

/// Kills the node when a test fails half-way, so that no daemon outlives
/// its test.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The real binary under a fake service manager: READY=1 once the client
/// port answers, STOPPING=1 after SIGTERM, then exit 0.
#[test]
fn the_daemon_notifies_ready_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&socket_path).unwrap();
    // Short, so that a node that dies before notifying is noticed at once.
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let state = dir.path().join("state");
    let mut node = KillOnDrop(Some(
        Command::new(NODE)
            .args(["--state-dir", state.to_str().unwrap()])
            .args(["--network", "deploy-test", "--mdns", "false"])
            .args(["--listen", "/ip4/127.0.0.1/tcp/0"])
            .args(["--client", "127.0.0.1:0", "--web", "127.0.0.1:0"])
            .args(["--cores", "1", "--memory-mib", "256", "--disk-mib", "100"])
            .env("NOTIFY_SOCKET", &socket_path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start zorilla-node"),
    ));
    let child = node.0.as_mut().unwrap();
    // Drain stdout so the node never blocks writing to it.
    let mut stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));

    let ready = wait_notify(&sock, child, "READY=1");
    // Ready means ready: the client and status page addresses it reports
    // accept connections.
    let status = ready
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("no STATUS in {ready:?}"));
    for (what, prefix, suffix) in [("client", "client ", ""), ("web", "web http://", "/")] {
        let addr = status
            .split(", ")
            .find_map(|part| part.strip_prefix(prefix)?.strip_suffix(suffix))
            .unwrap_or_else(|| panic!("no {what} address in {status:?}"));
        std::net::TcpStream::connect(addr)
            .unwrap_or_else(|e| panic!("{what} address {addr} from {status:?}: {e}"));
    }

    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    wait_notify(&sock, child, "STOPPING=1");
    let mut child = node.0.take().unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || tx.send(child.wait()));
    let Ok(status) = rx.recv_timeout(Duration::from_secs(30)) else {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        panic!("the node did not exit within 30 s of SIGTERM");
    };
    let status = status.unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
}

/// The field names of [`Config`], from serde itself (the error for an
/// unknown field lists the expected ones), so a new option cannot be left
/// out of the example.
fn config_fields() -> Vec<String> {
    let err = Config::from_toml("no_such_option = 1", Path::new("probe"))
        .unwrap_err()
        .to_string();
    let expected = err
        .split("expected one of")
        .nth(1)
        .unwrap_or_else(|| panic!("unexpected error format: {err}"));
    let fields: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(fields.len() >= 16, "too few fields in {err}");
    fields
}

/// A setting line, active (`key = ...`) or left at its default
/// (`#key = ...`): its key.
fn setting_key(line: &str) -> Option<&str> {
    let line = line.strip_prefix('#').unwrap_or(line);
    let (key, _) = line.split_once('=')?;
    let key = key.trim_end();
    (!key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')).then_some(key)
}

#[test]
fn the_example_config_parses_and_documents_every_option() {
    let path = deploy("zorilla.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let shipped = Config::load(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();

    for field in config_fields() {
        let at: Vec<usize> = (0..lines.len())
            .filter(|&i| setting_key(lines[i]) == Some(field.as_str()))
            .collect();
        assert_eq!(
            at.len(),
            1,
            "deploy/zorilla.toml must show `{field}` exactly once (as `{field} = ...` or \
             `#{field} = ...`), found at lines {at:?}"
        );
        // Explained: above it (past the settings it is grouped with) is
        // prose, a `# ` comment.
        let mut i = at[0];
        while i > 0 && setting_key(lines[i - 1]).is_some() {
            i -= 1;
        }
        assert!(
            i > 0 && lines[i - 1].starts_with("# "),
            "`{field}` in deploy/zorilla.toml has no explanation above it"
        );
    }

    // The shipped file gives a node that starts: valid addresses, no open
    // port without a token.
    let dir = tempfile::tempdir().unwrap();
    let with_state = |config: Config| Config {
        state_dir: Some(dir.path().to_owned()),
        ..config
    };
    Daemon::from_config(&with_state(shipped)).unwrap();

    // And every commented example value is valid too once uncommented.
    let all: String = lines
        .iter()
        .map(|l| match setting_key(l) {
            Some(_) => format!("{}\n", l.trim_start_matches('#')),
            None => format!("{l}\n"),
        })
        .collect();
    let every = Config::from_toml(&all, &path).unwrap();
    assert!(
        every.token.is_some() && every.peers.is_some() && every.deny.is_some(),
        "{every:?}"
    );
    // (The topology file, a closed grid's credential and the PMI library
    // install.sh builds are the operator's; the rest must resolve.)
    assert!(every.credential.is_some() && every.grid_key.is_some());
    assert!(every.native_pmi_library.is_some());
    let every = Config {
        topology: None,
        native_pmi_library: None,
        site: None,
        credential: None,
        grid_key: None,
        ..every
    };
    Daemon::from_config(&with_state(every)).unwrap();
}

fn install(args: &[&str]) -> Output {
    let out = Command::new("bash")
        .arg(deploy("install.sh"))
        .args(args)
        .output()
        .expect("run bash deploy/install.sh");
    eprintln!(
        "install.sh {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compares two files in chunks (a debug binary is too big to read whole,
/// twice, in every run).
fn same_contents(a: &Path, b: &Path) -> bool {
    use std::io::Read as _;
    let open = |p: &Path| std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let (mut a, mut b) = (open(a), open(b));
    if a.metadata().unwrap().len() != b.metadata().unwrap().len() {
        return false;
    }
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = a.read(&mut x).unwrap();
        if n == 0 {
            return true;
        }
        b.read_exact(&mut y[..n]).unwrap();
        if x[..n] != y[..n] {
            return false;
        }
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn install_sh_installs_into_a_root_directory_and_again_without_harm() {
    let tmp = tempfile::tempdir().unwrap();
    // The binary alone, so that no `zorilla` CLI is beside it, whatever
    // the target directory holds. A debug build is over 500 MB: linked
    // rather than copied where the file system allows.
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let binary = bin.join("zorilla-node");
    if std::fs::hard_link(NODE, &binary).is_err() {
        std::fs::copy(NODE, &binary).unwrap();
    }
    let root = tmp.path().join("root");
    let (b, r) = (binary.to_str().unwrap(), root.to_str().unwrap());

    let out = install(&["--no-build", "--binary", b, "--dest", r]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no zorilla CLI"));
    let node = root.join("usr/local/bin/zorilla-node");
    let unit = root.join("etc/systemd/system/zorilla-node.service");
    let config = root.join("etc/zorilla/zorilla.toml");
    assert!(
        same_contents(&node, Path::new(NODE)),
        "installed binary differs"
    );
    assert_eq!(mode(&node), 0o755);
    assert!(!root.join("usr/local/bin/zorilla").exists());
    assert_eq!(
        std::fs::read_to_string(&unit).unwrap(),
        std::fs::read_to_string(deploy("zorilla-node.service")).unwrap()
    );
    // The config may hold the token: not world-readable.
    assert_eq!(mode(&config), 0o640);
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        std::fs::read_to_string(deploy("zorilla.toml")).unwrap()
    );
    let version = Command::new(&node).arg("--version").output().unwrap();
    assert!(version.status.success(), "{version:?}");
    // The installed unit verifies against the installed binary.
    let check = tempfile::tempdir().unwrap();
    assert_verifies(&unit_copy(
        &std::fs::read_to_string(&unit).unwrap(),
        &node,
        check.path(),
    ));

    // Again, with the operator's config edited and a CLI built meanwhile:
    // the config is kept, the CLI is installed.
    let edited = format!(
        "{}\nnetwork = \"mine\"\n",
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("network = \"default\"", "")
    );
    std::fs::write(&config, &edited).unwrap();
    std::fs::write(bin.join("zorilla"), "#!/bin/sh\necho zorilla cli\n").unwrap();
    std::fs::set_permissions(bin.join("zorilla"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = install(&["--no-build", "--binary", b, "--dest", r]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("kept"));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert_eq!(mode(&root.join("usr/local/bin/zorilla")), 0o755);
    assert!(
        same_contents(&node, Path::new(NODE)),
        "installed binary differs"
    );

    // --prefix moves the binaries, and the unit follows them. (A stand-in
    // binary: one more copy of the real one is only disk space.)
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let stand_in = small.join("zorilla-node");
    std::fs::write(&stand_in, "#!/bin/sh\necho stand-in\n").unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = install(&[
        "--no-build",
        "--binary",
        stand_in.to_str().unwrap(),
        "--dest",
        r,
        "--prefix",
        "/opt/zorilla",
    ]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read(root.join("opt/zorilla/bin/zorilla-node")).unwrap(),
        std::fs::read(&stand_in).unwrap()
    );
    assert!(
        std::fs::read_to_string(&unit)
            .unwrap()
            .contains("\nExecStart=/opt/zorilla/bin/zorilla-node --config ")
    );
}

#[test]
fn install_sh_refuses_what_it_cannot_do() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().to_str().unwrap();
    let out = install(&["--no-build", "--dest", r]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-build needs --binary"));
    let missing = tmp.path().join("nothing-here");
    let out = install(&[
        "--no-build",
        "--binary",
        missing.to_str().unwrap(),
        "--dest",
        r,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no zorilla-node binary"));
    let out = install(&["--frobnicate"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option: --frobnicate"));
}

/// The unit with the native drop-in beside it, as systemd would read them:
/// `dir/zorilla-node.service` and `dir/zorilla-node.service.d/native.conf`
/// (systemd-analyze reads drop-ins from the unit's directory). Returns the
/// unit's path.
fn unit_with_drop_in(unit: &str, drop_in: &str, binary: &Path, dir: &Path) -> PathBuf {
    let path = unit_copy(unit, binary, dir);
    let d = dir.join("zorilla-node.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("native.conf"), drop_in).unwrap();
    path
}

/// The values of the drop-in's `key=` lines, space-separated, in order.
fn drop_in_values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .flat_map(|v| v.split_whitespace().map(str::to_owned))
        .collect()
}

/// The drop-in for native jobs verifies with the unit, and `systemd-analyze
/// security` shows that the unit with it allows what the sandbox's setup
/// needs (the namespaces, the capabilities, mounts, cgroup delegation)
/// while the rest of the hardening holds: no network, UTS or cgroup
/// namespace, no capability beyond the five, no module, raw I/O, clock or
/// debugging calls, no packet sockets, no new privileges.
#[test]
fn the_native_drop_in_verifies_and_grants_only_what_the_sandbox_needs() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(deploy("zorilla-node.service")).unwrap();
    let drop_in = std::fs::read_to_string(deploy("zorilla-node-native.conf")).unwrap();
    let copy = unit_with_drop_in(&unit, &drop_in, Path::new(NODE), dir.path());
    assert_verifies(&copy);

    // The helper the node starts gets its capabilities from the ambient
    // set: the same five as the bounding set.
    let bounding = drop_in_values(&drop_in, "CapabilityBoundingSet");
    assert_eq!(
        bounding,
        [
            "CAP_SYS_ADMIN",
            "CAP_SETUID",
            "CAP_SETGID",
            "CAP_CHOWN",
            "CAP_DAC_OVERRIDE"
        ]
    );
    assert_eq!(drop_in_values(&drop_in, "AmbientCapabilities"), bounding);
    // The calls of the setup that the unit's filter refuses, each added
    // back by name or by its group.
    let calls = drop_in_values(&drop_in, "SystemCallFilter");
    for call in [
        "mount",
        "umount2",
        "pivot_root",
        "@setuid",
        "capset",
        "@chown",
        "seccomp",
        "landlock_create_ruleset",
        "landlock_add_rule",
        "landlock_restrict_self",
    ] {
        assert!(calls.iter().any(|c| c == call), "{call} not in {calls:?}");
    }

    let out = systemd_analyze(&["security", "--offline=true", copy.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |check: &str| {
        stdout
            .lines()
            .find(|l| l.contains(&format!(" {check} ")))
            .unwrap_or_else(|| panic!("no {check} line in\n{stdout}"))
    };
    for granted in [
        "Delegate=",
        "ProtectControlGroups=",
        "RestrictNamespaces=~user",
        "RestrictNamespaces=~pid",
        "RestrictNamespaces=~mnt",
        "RestrictNamespaces=~ipc",
        "CapabilityBoundingSet=~CAP_SYS_ADMIN",
        "CapabilityBoundingSet=~CAP_SET(UID|GID|PCAP)",
        "CapabilityBoundingSet=~CAP_(CHOWN|FSETID|SETFCAP)",
        "SystemCallFilter=~@mount",
    ] {
        assert!(
            line(granted).starts_with('✗'),
            "the drop-in does not grant {granted}:\n{}",
            line(granted)
        );
    }
    for kept in [
        "RestrictNamespaces=~net",
        "RestrictNamespaces=~uts",
        "RestrictNamespaces=~cgroup",
        "NoNewPrivileges=",
        "CapabilityBoundingSet=~CAP_KILL",
        "CapabilityBoundingSet=~CAP_SYS_PTRACE",
        "CapabilityBoundingSet=~CAP_SYS_MODULE",
        "CapabilityBoundingSet=~CAP_NET_ADMIN",
        "CapabilityBoundingSet=~CAP_SYS_CHROOT",
        "CapabilityBoundingSet=~CAP_MKNOD",
        "CapabilityBoundingSet=~CAP_BPF",
        "SystemCallFilter=~@module",
        "SystemCallFilter=~@raw-io",
        "SystemCallFilter=~@clock",
        "SystemCallFilter=~@debug",
        "SystemCallFilter=~@reboot",
        "SystemCallFilter=~@swap",
        "RestrictAddressFamilies=~AF_PACKET",
        "ProtectKernelTunables=",
        "ProtectSystem=",
    ] {
        assert!(
            line(kept).starts_with('✓'),
            "the drop-in gives up {kept}:\n{}",
            line(kept)
        );
    }
}

/// The ids install.sh reserves are those the node gives its native workers.
fn native_ids() -> std::ops::Range<u32> {
    zorilla_sandbox::native::NativeConfig::new(PathBuf::new()).ids
}

/// A root directory with a stand-in binary and these passwd, group and
/// subuid files; returns (binary, root).
fn native_root(tmp: &Path, passwd: &str, group: &str, subuid: &str) -> (PathBuf, PathBuf) {
    let bin = tmp.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let stand_in = bin.join("zorilla-node");
    std::fs::write(&stand_in, "#!/bin/sh\necho stand-in\n").unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    for (file, text) in [("passwd", passwd), ("group", group), ("subuid", subuid)] {
        std::fs::write(root.join("etc").join(file), text).unwrap();
    }
    (stand_in, root)
}

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n";
const GROUP: &str = "root:x:0:\nalice:x:1000:\n";

#[test]
fn install_sh_native_installs_the_drop_in_and_reserves_the_workers_ids_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (binary, root) = native_root(tmp.path(), PASSWD, GROUP, "alice:100000:65536\n");
    let (b, r) = (binary.to_str().unwrap(), root.to_str().unwrap());
    let ids = native_ids();
    let entry = format!("zorilla:{}:{}\n", ids.start, ids.end - ids.start);

    let out = install(&["--no-build", "--binary", b, "--dest", r, "--native"]);
    assert!(out.status.success());
    let dropin = root.join("etc/systemd/system/zorilla-node.service.d/native.conf");
    assert_eq!(
        std::fs::read_to_string(&dropin).unwrap(),
        std::fs::read_to_string(deploy("zorilla-node-native.conf")).unwrap()
    );
    assert_eq!(mode(&dropin), 0o644);
    let subuid = root.join("etc/subuid");
    let subgid = root.join("etc/subgid");
    assert_eq!(
        std::fs::read_to_string(&subuid).unwrap(),
        format!("alice:100000:65536\n{entry}")
    );
    // No subgid file before: made, with the entry alone.
    assert_eq!(std::fs::read_to_string(&subgid).unwrap(), entry);
    assert_eq!(mode(&subgid), 0o644);
    // The library for native MPI ranks, where the node looks for it by
    // default, with the PMI_* calls Open MPI's component loads and the two
    // UCX calls whose fix MPICH's MPI_Finalize needs.
    let library = root.join(
        zorilla_node::config::DEFAULT_NATIVE_PMI_LIBRARY
            .strip_prefix('/')
            .unwrap(),
    );
    assert_eq!(mode(&library), 0o644);
    let symbols = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&library)
        .output()
        .unwrap();
    let symbols = String::from_utf8_lossy(&symbols.stdout);
    for call in [
        "PMI_Init",
        "PMI_KVS_Put",
        "PMI_KVS_Get",
        "PMI_Barrier",
        "PMI_Get_clique_ranks",
        "ucp_disconnect_nb",
        "ucp_worker_destroy",
    ] {
        assert!(
            symbols.contains(&format!(" T {call}\n")),
            "{call} in {symbols}"
        );
    }
    // The owner is told what is left to do.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("native_users = ["), "{stdout}");
    // The installed unit and drop-in verify together.
    let check = tempfile::tempdir().unwrap();
    assert_verifies(&unit_with_drop_in(
        &std::fs::read_to_string(root.join("etc/systemd/system/zorilla-node.service")).unwrap(),
        &std::fs::read_to_string(&dropin).unwrap(),
        &binary,
        check.path(),
    ));

    // Again: the ids are reserved once; with native_users set the owner
    // is not told to set it.
    let config = root.join("etc/zorilla/zorilla.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("native_users = [\"12D3KooWNTiS4dgqGsnWQ679cWV2qELwKgz871TdA71nuCT9i64d\"]\n");
    std::fs::write(&config, text).unwrap();
    let out = install(&["--no-build", "--binary", b, "--dest", r, "--native"]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&subuid).unwrap(),
        format!("alice:100000:65536\n{entry}")
    );
    assert_eq!(std::fs::read_to_string(&subgid).unwrap(), entry);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("native_users = ["), "{stdout}");
    assert!(stdout.contains("lists native_users"), "{stdout}");

    // An upgrade without --native keeps native jobs on: the drop-in is
    // upgraded with the unit, not dropped.
    std::fs::write(&dropin, "[Service]\n# an old drop-in\n").unwrap();
    let out = install(&["--no-build", "--binary", b, "--dest", r]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&dropin).unwrap(),
        std::fs::read_to_string(deploy("zorilla-node-native.conf")).unwrap()
    );

    // Without --native on a fresh root, none of it.
    let plain = tmp.path().join("plain");
    let out = install(&[
        "--no-build",
        "--binary",
        b,
        "--dest",
        plain.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(
        !plain
            .join("etc/systemd/system/zorilla-node.service.d")
            .exists()
    );
    assert!(!plain.join("etc/subuid").exists());
}

/// A user, a group or another subordinate range with one of the workers'
/// ids: install.sh --native refuses, saying which, and installs nothing.
/// `install.sh --native` of `binary` into the root directory `root`.
fn install_native(binary: &Path, root: &Path) -> Output {
    install(&[
        "--no-build",
        "--binary",
        binary.to_str().unwrap(),
        "--dest",
        root.to_str().unwrap(),
        "--native",
    ])
}

#[test]
fn install_sh_native_refuses_ids_that_are_taken() {
    let ids = native_ids();
    let taken = ids.start + 5;
    let cases = [
        (
            format!("{PASSWD}mallory:x:{taken}:100::/:/bin/sh\n"),
            GROUP.to_owned(),
            String::new(),
            "user mallory has id",
        ),
        (
            PASSWD.to_owned(),
            format!("{GROUP}builders:x:{}:\n", ids.end - 1),
            String::new(),
            "group builders has id",
        ),
        (
            PASSWD.to_owned(),
            GROUP.to_owned(),
            format!("alice:{}:65536\n", ids.start - 10),
            "gives alice ids",
        ),
    ];
    for (passwd, group, subuid, says) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let (binary, root) = native_root(tmp.path(), &passwd, &group, &subuid);
        let out = install_native(&binary, &root);
        assert!(!out.status.success(), "{says}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(!root.join("etc/systemd").exists(), "{says}");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/subuid")).unwrap(),
            subuid
        );
    }
    // Ids just outside the range are nobody's business.
    let tmp = tempfile::tempdir().unwrap();
    let (binary, root) = native_root(
        tmp.path(),
        &format!("{PASSWD}next:x:{}:100::/:/bin/sh\n", ids.end),
        &format!("{GROUP}before:x:{}:\n", ids.start - 1),
        &format!("alice:{}:10\n", ids.start - 10),
    );
    let out = install_native(&binary, &root);
    assert!(out.status.success());
}
