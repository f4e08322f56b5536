//! Separate hosts for multi-node tests: network namespaces that the test
//! creates itself, so that nodes talk over real interfaces, through a
//! bridge per site and a router between sites, as on machines of a LAN or
//! of several sites, and not over loopback.
//!
//! The layout of one [`Hosts`] (every name carries the run's prefix
//! `zt<pid>n<counter>`, so tests running at once never meet):
//!
//! - a namespace per **site** S (1, 2, ...) holding the site's bridge `br0`;
//! - a namespace per **host**, with `lo` up and one interface `eth0` (a veth
//!   pair whose other end is a port of its site's bridge) with the address
//!   10.77.S.H/24 and a default route through the router;
//! - one **router** namespace, with an interface on every site's bridge
//!   (10.77.S.254/24) and IP forwarding on.
//!
//! 10.77.0.0/16 exists only inside these namespaces: no address is added,
//! and no interface made, anywhere else (the veth pairs are created in the
//! namespaces directly), so the test can neither collide with a real
//! network nor with another test. Sites differ in emulated latency (the
//! overlay's `--topology`, by host address), since the kernel here has no
//! netem.
//!
//! A node runs in its host's namespace through `nsenter --net=` (util-linux:
//! it enters the namespace and execs the node, so the child's pid is the
//! node's and `kill -9` hits the node; `ip netns exec` would also remount
//! `/sys`, which the node does not need). Its client port and status page
//! listen on 127.0.0.1 inside that namespace, and the test reaches them by
//! opening its sockets from a thread that entered the namespace
//! ([`connect_in`]): a socket stays in the namespace it was made in.
//!
//! **NAT** ([`Hosts::behind_nats`]): an "internet" (one bridge, 10.77.200.0/24)
//! with public hosts on it (10.77.200.H), and private hosts each behind a
//! NAT router of its own (host 10.77.K.1, router 10.77.K.254 on the LAN
//! side, 10.77.200.(100+K) on the internet), the router masquerading
//! (nftables) what leaves on its internet leg, dropping what comes in
//! unasked, as a home router does ([`Nat`] says how it maps ports). The
//! public hosts have no route to the LANs: a private host is reached only
//! through its router's mappings.
//!
//! Everything is deleted on drop, also when the test panics. The harness
//! touches only namespaces it made: each one is written down in a ledger
//! in this build's target directory (`CARGO_TARGET_TMPDIR`) before it is
//! made and struck off when deleted, and the sweep at the first
//! [`Hosts::new`] of a run deletes only namespaces of that ledger whose
//! test binary died without dropping them (a killed run), killing inside
//! them only processes of this build's `zorilla-node`. Another
//! checkout's, user's or tool's namespaces, whatever their names, are
//! never looked at. Needs root (CI runs as root); without it the test
//! fails and says so.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

/// The first part of every namespace name the harness makes.
const PREFIX: &str = "zt";
/// Most hosts per site (10.77.S.1 to 10.77.S.200; .254 is the router).
pub(crate) const MAX_HOSTS_PER_SITE: usize = 200;
/// Most sites (10.77.1.0/24 to 10.77.50.0/24).
pub(crate) const MAX_SITES: usize = 50;

/// The ledger of namespaces this build's tests made and have not deleted:
/// an empty file per namespace, named as it.
fn ledger() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("netns-made")
}

/// Hosts made by this process so far (the second part of a prefix).
static COUNTER: AtomicU32 = AtomicU32::new(0);
/// The sweep of stale namespaces, once per process.
static SWEEP: std::sync::Once = std::sync::Once::new();

/// How a NAT router maps a private host's outgoing connections to ports of
/// its public address (nftables 1.0.6 on Linux, checked by
/// `nat.rs`'s `nat_routers_map_ports_as_their_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nat {
    /// Endpoint-independent mapping: a host's port keeps its number on
    /// the router (plain `masquerade`, which keeps the source port when
    /// it is free), whatever the destination; filtering is still per
    /// connection (conntrack lets in only answers), so a peer gets in only
    /// by sending to the mapping while the host sends to it (hole
    /// punching).
    EndpointIndependent,
    /// Symmetric: every connection gets a random port (`masquerade
    /// fully-random`), so the port a peer saw is of no use to another.
    Symmetric,
}

impl Nat {
    /// The nftables ruleset of a router whose internet leg is `wan`.
    fn ruleset(self) -> String {
        let flags = match self {
            Nat::EndpointIndependent => "",
            Nat::Symmetric => " fully-random",
        };
        format!(
            "table ip nat {{\n\
             \tchain postrouting {{\n\
             \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
             \t\toifname \"wan\" masquerade{flags}\n\
             \t}}\n\
             }}\n\
             table inet filter {{\n\
             \tchain input {{\n\
             \t\ttype filter hook input priority filter; policy accept;\n\
             \t\tiifname \"wan\" ct state new drop\n\
             \t}}\n\
             \tchain forward {{\n\
             \t\ttype filter hook forward priority filter; policy accept;\n\
             \t\tiifname \"wan\" ct state new drop\n\
             \t}}\n\
             }}\n"
        )
    }
}

/// One host of a [`Hosts`]: its namespace and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    /// The network namespace's name (`/run/netns/NAME`).
    pub(crate) netns: String,
    /// Its address on its site's bridge.
    pub(crate) ip: Ipv4Addr,
    /// Its site's index, from 0.
    pub(crate) site: usize,
}

/// Sites of hosts in network namespaces of their own, joined by a router;
/// deleted on drop.
#[derive(Debug)]
pub(crate) struct Hosts {
    /// Every namespace made, in the order made.
    namespaces: Vec<String>,
    /// The hosts, site by site.
    pub(crate) hosts: Vec<Host>,
}

/// Runs `ip` with `args`, failing the test with what it said if it fails.
fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `ip` (iproute2), which the namespace tests need: {e}")
    });
    assert!(
        output.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
}

/// Turns IP forwarding on in the namespace `router`.
fn forward(router: &str) {
    ip(&[
        "netns",
        "exec",
        router,
        "sh",
        "-c",
        "echo 1 > /proc/sys/net/ipv4/ip_forward",
    ]);
}

impl Hosts {
    /// Sites of `sizes[s]` hosts each (site s gets 10.77.(s+1).0/24).
    pub(crate) fn new(sizes: &[usize]) -> Hosts {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test runs its nodes on separate hosts, in network namespaces it creates \
             (`ip netns add`), which needs root: run it as root, as CI does"
        );
        assert!(
            !sizes.is_empty()
                && sizes.len() <= MAX_SITES
                && sizes.iter().all(|&n| (1..=MAX_HOSTS_PER_SITE).contains(&n)),
            "1 to {MAX_SITES} sites of 1 to {MAX_HOSTS_PER_SITE} hosts, not {sizes:?}"
        );
        let started = std::time::Instant::now();
        let (mut made, prefix) = Hosts::begin();
        // From here on a failure panics with `made` alive: its drop
        // deletes what was made so far.
        let router = made.add_netns(format!("{prefix}-r"));
        forward(&router);
        for (s, &size) in sizes.iter().enumerate() {
            let net = s + 1;
            let site = made.add_netns(format!("{prefix}-s{net}"));
            ip(&["-n", &site, "link", "add", "br0", "type", "bridge"]);
            ip(&["-n", &site, "link", "set", "br0", "up"]);
            // The router's leg on this site: `sN` there, `r` on the bridge.
            let leg = format!("s{net}");
            ip(&[
                "-n", &router, "link", "add", &leg, "type", "veth", "peer", "name", "r", "netns",
                &site,
            ]);
            ip(&["-n", &site, "link", "set", "r", "master", "br0", "up"]);
            ip(&[
                "-n",
                &router,
                "addr",
                "add",
                &format!("10.77.{net}.254/24"),
                "dev",
                &leg,
            ]);
            ip(&["-n", &router, "link", "set", &leg, "up"]);
            for h in 1..=size {
                let host = made.add_bridged_host(
                    format!("{prefix}-h{net}.{h}"),
                    &site,
                    &format!("h{h}"),
                    &format!("10.77.{net}.{h}/24"),
                    Some(&format!("10.77.{net}.254")),
                );
                made.hosts.push(Host {
                    netns: host,
                    ip: Ipv4Addr::new(10, 77, net as u8, h as u8),
                    site: s,
                });
            }
        }
        eprintln!(
            "{} hosts in {} sites set up in {:?}",
            made.hosts.len(),
            sizes.len(),
            started.elapsed()
        );
        made
    }

    /// Cuts `host` off the network (`up == false`: its port on its site's
    /// bridge goes down, so nothing it sends arrives and nothing reaches
    /// it; its own interface and routes stay as they are, as behind a
    /// broken switch port), or joins it again (`up == true`).
    pub(crate) fn set_link(&self, host: &Host, up: bool) {
        let (prefix, rest) = host
            .netns
            .rsplit_once("-h")
            .expect("a host's namespace is PREFIX-hS.H");
        let net = host.site + 1;
        let h = rest
            .rsplit('.')
            .next()
            .expect("a host's namespace is PREFIX-hS.H");
        let site = format!("{prefix}-s{net}");
        let port = format!("h{h}");
        ip(&[
            "-n",
            &site,
            "link",
            "set",
            &port,
            if up { "up" } else { "down" },
        ]);
    }

    /// `public` hosts on an internet bridge (10.77.200.1, ...; site 0),
    /// then one private host behind a NAT router of each kind in `nats`
    /// (10.77.K.1 for the K-th, from 1; site K): see the module's doc.
    pub(crate) fn behind_nats(public: usize, nats: &[Nat]) -> Hosts {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test runs its nodes behind NAT routers in network namespaces it creates \
             (`ip netns add`, nftables), which needs root: run it as root, as CI does"
        );
        assert!(
            (1..=50).contains(&public) && nats.len() <= 50,
            "1 to 50 public hosts and at most 50 NATs, not {public} and {}",
            nats.len()
        );
        let started = std::time::Instant::now();
        let (mut made, prefix) = Hosts::begin();
        let inet = made.add_netns(format!("{prefix}-i"));
        ip(&["-n", &inet, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &inet, "link", "set", "br0", "up"]);
        for h in 1..=public {
            let host = made.add_bridged_host(
                format!("{prefix}-p{h}"),
                &inet,
                &format!("p{h}"),
                &format!("10.77.200.{h}/24"),
                None,
            );
            made.hosts.push(Host {
                netns: host,
                ip: Ipv4Addr::new(10, 77, 200, h as u8),
                site: 0,
            });
        }
        for (k, nat) in nats.iter().enumerate() {
            let k = k + 1;
            let router = made.add_netns(format!("{prefix}-nat{k}"));
            let host = made.add_netns(format!("{prefix}-h{k}.1"));
            // The router's internet leg: `wan` there, `n{k}` on the bridge.
            let port = format!("n{k}");
            ip(&[
                "-n", &router, "link", "add", "wan", "type", "veth", "peer", "name", &port,
                "netns", &inet,
            ]);
            ip(&["-n", &inet, "link", "set", &port, "master", "br0", "up"]);
            let wan = format!("10.77.200.{}/24", 100 + k);
            ip(&["-n", &router, "addr", "add", &wan, "dev", "wan"]);
            ip(&["-n", &router, "link", "set", "wan", "up"]);
            // The LAN: a veth pair straight to the host.
            ip(&[
                "-n", &router, "link", "add", "lan", "type", "veth", "peer", "name", "eth0",
                "netns", &host,
            ]);
            ip(&[
                "-n",
                &router,
                "addr",
                "add",
                &format!("10.77.{k}.254/24"),
                "dev",
                "lan",
            ]);
            ip(&["-n", &router, "link", "set", "lan", "up"]);
            ip(&["-n", &host, "link", "set", "lo", "up"]);
            ip(&[
                "-n",
                &host,
                "addr",
                "add",
                &format!("10.77.{k}.1/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &host, "link", "set", "eth0", "up"]);
            ip(&[
                "-n",
                &host,
                "route",
                "add",
                "default",
                "via",
                &format!("10.77.{k}.254"),
            ]);
            forward(&router);
            nft(&router, &nat.ruleset());
            made.hosts.push(Host {
                netns: host,
                ip: Ipv4Addr::new(10, 77, k as u8, 1),
                site: k,
            });
        }
        eprintln!(
            "{public} public hosts and {} behind NATs {nats:?} set up in {:?}",
            nats.len(),
            started.elapsed()
        );
        made
    }

    /// Every namespace made, in the order made.
    pub(crate) fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// An empty set of hosts and the prefix of its namespaces' names
    /// (stale namespaces of earlier runs swept first, once per run).
    fn begin() -> (Hosts, String) {
        SWEEP.call_once(sweep_stale);
        let prefix = format!(
            "{PREFIX}{}n{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let made = Hosts {
            namespaces: Vec::new(),
            hosts: Vec::new(),
        };
        (made, prefix)
    }

    /// A host namespace `name` whose `eth0` (address `cidr`, default route
    /// through `gateway` if any) is a veth pair with its other end `port`
    /// on the bridge `br0` of namespace `bridge`; its name.
    fn add_bridged_host(
        &mut self,
        name: String,
        bridge: &str,
        port: &str,
        cidr: &str,
        gateway: Option<&str>,
    ) -> String {
        let host = self.add_netns(name);
        ip(&[
            "-n", &host, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns",
            bridge,
        ]);
        ip(&["-n", bridge, "link", "set", port, "master", "br0", "up"]);
        ip(&["-n", &host, "link", "set", "lo", "up"]);
        ip(&["-n", &host, "addr", "add", cidr, "dev", "eth0"]);
        ip(&["-n", &host, "link", "set", "eth0", "up"]);
        if let Some(gateway) = gateway {
            ip(&["-n", &host, "route", "add", "default", "via", gateway]);
        }
        host
    }

    fn add_netns(&mut self, name: String) -> String {
        // Written down first, so that a run killed in between leaves
        // nothing the sweep does not know of.
        let ledger = ledger();
        std::fs::create_dir_all(&ledger)
            .and_then(|()| File::create(ledger.join(&name)))
            .unwrap_or_else(|e| {
                panic!("cannot note namespace {name} in {}: {e}", ledger.display())
            });
        ip(&["netns", "add", &name]);
        self.namespaces.push(name.clone());
        name
    }
}

/// Loads the nftables `ruleset` in namespace `netns`, failing the test
/// with what `nft` said if it fails.
fn nft(netns: &str, ruleset: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `nft` (nftables), which the NAT tests need: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ruleset.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "nft failed ({}; is nftables installed?) on:\n{ruleset}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
}

/// Runs `f` on a thread inside the network namespace `netns` (sockets it
/// makes stay there).
pub(crate) fn in_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let ns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap_or_else(|e| panic!("cannot enter {path}: {e}"));
        f()
    })
    .join()
    .expect("the thread in the namespace panicked")
}

impl Drop for Hosts {
    /// Deletes the namespaces (their interfaces, bridges and veth pairs go
    /// with them once no process is left inside).
    fn drop(&mut self) {
        for name in self.namespaces.iter().rev() {
            let done = Command::new("ip").args(["netns", "delete", name]).output();
            if matches!(&done, Ok(o) if o.status.success()) {
                let _ = std::fs::remove_file(ledger().join(name));
            } else {
                eprintln!("could not delete network namespace {name}: {done:?}");
            }
        }
    }
}

/// When the process `pid` started (`None` if there is no such process).
fn process_start(pid: u32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command's closing parenthesis (the
    // command may contain spaces).
    let after = &stat[stat.rfind(')')? + 2..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let per_sec = rustix::param::clock_ticks_per_second().max(1);
    Some(
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(boot)
            + Duration::from_millis(ticks.saturating_mul(1000) / per_sec),
    )
}

/// Deletes namespaces of this harness that no running test owns: their
/// process is gone, or its pid now belongs to a process started after the
/// namespace was made (a pid reused). Only namespaces of this build's
/// ledger ([`ledger`]): what this harness made.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(ledger()) else {
        return;
    };
    let node = std::path::Path::new(env!("CARGO_BIN_EXE_zorilla-node"));
    for entry in entries.flatten().take(10_000) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('n').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let made = std::fs::metadata(format!("/run/netns/{name}"))
            .and_then(|m| m.modified())
            .ok();
        if made.is_none() {
            // Noted but gone (deleted by hand, or never made).
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let stale = match (process_start(pid), made) {
            (None, _) => true,
            // A second's slack for the clock ticks' rounding.
            (Some(started), Some(made)) => made + Duration::from_secs(1) < started,
            (Some(_), None) => false,
        };
        if stale {
            // Nodes a killed test binary left running there go first (a
            // namespace lives as long as a process is inside); only this
            // build's node binary, which is what the harness starts there.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &name]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let ours = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
                        let exe = exe.to_string_lossy();
                        std::path::Path::new(exe.trim_end_matches(" (deleted)")) == node
                    });
                    if !ours {
                        eprintln!("left process {pid} in the stale namespace {name}: not our node");
                        continue;
                    }
                    if let Some(pid) = pid.parse().ok().and_then(rustix::process::Pid::from_raw) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
            }
            let done = Command::new("ip").args(["netns", "delete", &name]).output();
            if matches!(&done, Ok(o) if o.status.success()) {
                let _ = std::fs::remove_file(entry.path());
            }
            eprintln!("deleted the stale network namespace {name}");
        }
    }
}

/// A TCP connection to `addr` made inside the network namespace `netns`
/// (from a thread that enters it; the socket stays there).
pub(crate) fn connect_in(netns: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let ns = File::open(&path)?;
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        TcpStream::connect_timeout(&addr, Duration::from_secs(10))
    })
    .join()
    .expect("the connecting thread panicked")
}

/// `GET path` from the HTTP server at `addr` inside `netns`: the status
/// code and the body (the status page answers HTTP/1.1 and closes the
/// connection when asked to).
pub(crate) fn http_get_in(netns: &str, addr: SocketAddr, path: &str) -> (u16, String) {
    let stream = connect_in(netns, addr)
        .unwrap_or_else(|e| panic!("cannot reach {addr} in namespace {netns}: {e}"));
    http_get_over(stream, addr, path)
}

/// `GET path` from the HTTP server at `addr` (on this machine).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("cannot reach {addr}: {e}"));
    http_get_over(stream, addr, path)
}

/// `GET path` over `stream`, connected to `addr`.
fn http_get_over(mut stream: TcpStream, addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream
        .take(16 << 20)
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("reading the answer to GET {path}: {e}"));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status code in {head:?}"));
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_vec()
    };
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// The body of a chunked HTTP answer.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..100_000 {
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let line = String::from_utf8_lossy(&rest[..end]);
        let size =
            usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        let after = &rest[end + 2..];
        if size == 0 || after.len() < size {
            break;
        }
        body.extend_from_slice(&after[..size]);
        rest = after[size..]
            .strip_prefix(b"\r\n")
            .unwrap_or(&after[size..]);
    }
    body
}
