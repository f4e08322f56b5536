//! Staged start-up of a node (state directory, database, sandbox, overlay,
//! client listener, status page, event loop) and its orderly shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

use tokio::sync::{mpsc, watch};
use zorilla_core::node::{NativePolicy, OwnerLimits, SchedulerConfig, UserLimits, UserPolicy};
use zorilla_core::resources::Resources;
use zorilla_overlay::{
    LatencyEmulation, Multiaddr, Overlay, OverlayConfig, PeerId, SharedTopology, Topology,
};
use zorilla_sandbox::{Limits, Sandbox, SandboxConfig};

use crate::config::{self, Config};
use crate::node::{Node, Parts};
use crate::server::ServerConfig;
use crate::status::{NodeStatus, Publisher};
use crate::store::Store;

/// A node's configuration with every default resolved.
#[derive(Debug, Clone)]
pub struct Daemon {
    /// The state directory.
    pub state_dir: PathBuf,
    /// What the node offers to jobs.
    pub resources: Resources,
    /// The scheduler's configuration (owner limits included).
    pub scheduler: SchedulerConfig<PeerId>,
    /// The overlay's configuration.
    pub overlay: OverlayConfig,
    /// The client protocol's address.
    pub client: SocketAddr,
    /// The status page's address.
    pub web: SocketAddr,
    /// The secret clients must present off loopback (see
    /// [`Config::token`]).
    pub token: Option<String>,
    /// The most clients connected at once.
    pub max_clients: usize,
    /// The owner's caps on one worker's CPU and wall-clock time
    /// ([`Duration::MAX`]: none).
    pub worker_time: WorkerTimeCaps,
    /// Finished home jobs kept in memory (see
    /// [`Config::finished_in_memory`]).
    pub finished_in_memory: usize,
    /// The database's page cache, bytes (see [`Config::store_cache_kib`]).
    pub store_cache_bytes: usize,
    /// How workers' checkpoints are kept, and how many of other nodes'
    /// this node holds (see [`Config::checkpoint_max_mib`] and after).
    pub(crate) checkpoints: crate::checkpoint::CheckpointSettings,
    /// Where this machine is (see [`Config::site`]).
    pub site: Option<String>,
    /// The CPU speed figure the scheduler's offers carry
    /// (`scheduler.speed`), and where it came from (`cpu_speed`
    /// configured, or measured).
    pub(crate) cpu_speed: crate::cpuspeed::CpuSpeed,
    /// How the status page's grid view asks the peers (see
    /// [`Config::grid_view_peers`]).
    pub grid_view: zorilla_webui::grid::GridSettings,
    /// What native workers may read besides their job directory.
    pub native_read_only: Vec<PathBuf>,
    /// The PMI-1 library for Open MPI programs, if there is one (see
    /// [`Config::native_pmi_library`]).
    pub native_pmi_library: Option<PathBuf>,
}

/// The owner's caps on how long one worker may run; a job's own limits are
/// lowered to these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerTimeCaps {
    /// CPU time ([`Config::max_cpu_time_secs`]).
    pub cpu: Duration,
    /// Wall-clock time ([`Config::max_wall_time_secs`]).
    pub wall: Duration,
}

impl WorkerTimeCaps {
    fn from_config(config: &Config) -> WorkerTimeCaps {
        let cap = |secs: Option<u64>| match secs {
            None | Some(0) => Duration::MAX,
            Some(secs) => Duration::from_secs(secs),
        };
        WorkerTimeCaps {
            cpu: cap(config.max_cpu_time_secs),
            wall: cap(config.max_wall_time_secs),
        }
    }
}

/// A closed grid's settings from `credential` and `grid_key`, checked as
/// peers will check them: a node refuses to start with a credential that
/// every peer would refuse (expired, revoked, another grid's, another
/// peer's), and says why.
fn closed_grid(
    config: &Config,
    state_dir: &std::path::Path,
) -> anyhow::Result<Option<zorilla_overlay::membership::GridConfig>> {
    use zorilla_overlay::membership::{Credential, GridConfig, GridPublicKey};
    let Some(path) = &config.credential else {
        if config.grid_key.is_some() {
            anyhow::bail!(
                "grid_key is set but credential is not: a node of a closed grid needs its \
                 credential (`zorilla-node grid issue` makes one for this node's peer id, \
                 which `zorilla-node id` prints)"
            );
        }
        return Ok(None);
    };
    let credential = Credential::load(path)?;
    let key = match &config.grid_key {
        Some(text) => {
            let key: GridPublicKey = text.parse().map_err(|e| anyhow::anyhow!("grid_key: {e}"))?;
            if credential.body().grid != key {
                anyhow::bail!(
                    "credential {}: it is of grid {}, not of grid_key {}",
                    path.display(),
                    credential.body().grid.fingerprint(),
                    key.fingerprint()
                );
            }
            key
        }
        None => credential.body().grid,
    };
    let grid = GridConfig::new(key, credential);
    let local = zorilla_overlay::identity::load_or_create(state_dir)?
        .public()
        .to_peer_id();
    let membership =
        zorilla_overlay::membership::check_own_credential(&grid, local, Some(state_dir)).map_err(
            |e| {
                anyhow::anyhow!(
                    "credential {}: {e}; this node cannot join grid {} with it (ask the grid's \
                     founder or an inviter for a new one)",
                    path.display(),
                    key.fingerprint()
                )
            },
        )?;
    tracing::info!(
        grid = %key.fingerprint(),
        expires = membership.expires,
        "closed grid: peers must show a credential of this grid"
    );
    Ok(Some(grid))
}

/// What `zorilla node` and the status page tell of a closed grid.
fn grid_info(grid: &zorilla_overlay::membership::GridConfig) -> crate::protocol::GridInfo {
    // The first link to expire ends the credential.
    let expires = std::iter::once(grid.credential.body().expires)
        .chain(grid.credential.inviter().map(|i| i.body().expires))
        .min()
        .unwrap_or(0);
    crate::protocol::GridInfo {
        key: grid.key.to_string(),
        fingerprint: grid.key.fingerprint(),
        expires_unix: expires,
    }
}

impl Daemon {
    /// Resolves `config`: defaults, detection, owner limits, topology.
    pub fn from_config(config: &Config) -> anyhow::Result<Daemon> {
        // Before anything is created on disk.
        config::check_quic(config.quic, zorilla_overlay::QUIC_SUPPORTED)?;
        // A token or an address that cannot be is refused before the
        // node measures or creates anything (one sentence, nothing else).
        let client = config
            .client
            .unwrap_or_else(|| config::DEFAULT_CLIENT.parse().expect("valid default"));
        let web = config
            .web
            .unwrap_or_else(|| config::DEFAULT_WEB.parse().expect("valid default"));
        if let Some(token) = &config.token {
            config::check_token(token).map_err(|e| anyhow::anyhow!(e))?;
        }
        let token = config.token.clone();
        for (what, addr) in [("client", client), ("web", web)] {
            if !addr.ip().is_loopback() && token.is_none() {
                anyhow::bail!(
                    "the {what} address {addr} is not on loopback, so it needs a token: \
                     set `token` in the config file or ZORILLA_TOKEN (anyone who can reach \
                     an open client port can run code on this machine)"
                );
            }
        }
        let state_dir = config.state_dir();
        std::fs::create_dir_all(&state_dir)
            .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
        let detected = config::detect(&state_dir);
        let resources = Resources::new(
            config.cores.unwrap_or(detected.cores),
            config
                .memory_mib
                .unwrap_or((detected.memory_mib as f64 * config::DEFAULT_MEMORY_SHARE) as u64),
            config
                .disk_mib
                .unwrap_or((detected.disk_free_mib as f64 * config::DEFAULT_DISK_SHARE) as u64),
        );
        let mut deny = BTreeSet::new();
        for peer in config.deny.iter().flatten() {
            deny.insert(
                peer.parse::<PeerId>()
                    .map_err(|e| anyhow::anyhow!("deny: {peer:?} is not a peer id: {e}"))?,
            );
        }
        let users = user_policy(config)?;
        let finished_in_memory = match config.finished_in_memory {
            None => config::DEFAULT_FINISHED_IN_MEMORY,
            Some(n) if n > config::MAX_FINISHED_IN_MEMORY => anyhow::bail!(
                "finished_in_memory: {n} is more than the most, {}",
                config::MAX_FINISHED_IN_MEMORY
            ),
            Some(n) => n.max(config::MIN_FINISHED_IN_MEMORY),
        };
        let store_cache_bytes = match config.store_cache_kib {
            None => crate::store::CACHE_BYTES,
            Some(kib) if kib > config::MAX_STORE_CACHE_KIB => anyhow::bail!(
                "store_cache_kib: {kib} is more than the most, {}",
                config::MAX_STORE_CACHE_KIB
            ),
            Some(kib) => (kib * 1024) as usize,
        };
        let checkpoints = crate::checkpoint::CheckpointSettings::from_config(config)?;
        let grid_view = zorilla_webui::grid::GridSettings {
            max_peers: match config.grid_view_peers {
                None => zorilla_webui::grid::GridSettings::DEFAULT_MAX_PEERS,
                Some(n) if n > zorilla_webui::grid::GridSettings::MOST_PEERS => anyhow::bail!(
                    "grid_view_peers: {n} is more than the most, {}",
                    zorilla_webui::grid::GridSettings::MOST_PEERS
                ),
                Some(n) => n,
            },
            ..zorilla_webui::grid::GridSettings::default()
        };
        let scheduler = SchedulerConfig {
            resources,
            // Set below, once every setting checked out.
            speed: zorilla_core::resources::REFERENCE_SPEED,
            limits: OwnerLimits {
                max_jobs: config.max_jobs.unwrap_or(config::DEFAULT_MAX_JOBS),
                max_workers_per_job: config
                    .max_workers_per_job
                    .unwrap_or(config::DEFAULT_MAX_WORKERS_PER_JOB),
                deny,
                users,
                native: native_policy(config)?,
            },
            // The scheduler's reports of ended jobs go with their records.
            ended_capacity: finished_in_memory,
            // Fresh at each start: no member may guess which of its
            // results a spot check re-runs.
            seed: rand::TryRngCore::try_next_u64(&mut rand::rngs::OsRng)
                .map_err(|e| anyhow::anyhow!("the system's random number source: {e}"))?,
            ..SchedulerConfig::default()
        };
        let parse_addrs = |what: &str, addrs: &[String]| -> anyhow::Result<Vec<Multiaddr>> {
            addrs
                .iter()
                .map(|a| {
                    a.parse::<Multiaddr>()
                        .map_err(|e| anyhow::anyhow!("{what}: {a:?} is not a multiaddress: {e}"))
                })
                .collect()
        };
        let listen = parse_addrs(
            "listen",
            config
                .listen
                .as_deref()
                .unwrap_or(&[config::DEFAULT_LISTEN.to_string()]),
        )?;
        let bootstrap = parse_addrs("peers", config.peers.as_deref().unwrap_or(&[]))?;
        let latency = match &config.topology {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read topology {}", path.display()))?;
                let topology = Topology::from_toml_str(&text)?;
                let site = config
                    .site
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("a topology needs this node's site"))?;
                Some(LatencyEmulation {
                    topology: SharedTopology::new(topology),
                    site,
                })
            }
        };
        let overlay = OverlayConfig {
            network: config
                .network
                .clone()
                .unwrap_or_else(|| config::DEFAULT_NETWORK.into()),
            listen,
            bootstrap,
            mdns: config.mdns.unwrap_or(true),
            max_connections: config
                .max_connections
                .unwrap_or(zorilla_overlay::config::DEFAULT_MAX_CONNECTIONS),
            state_dir: Some(state_dir.clone()),
            latency,
            quic: config.quic.unwrap_or(false),
            direct_ranks: config.direct_ranks.unwrap_or(true),
            rank_lanes: config
                .rank_lanes
                .unwrap_or_else(zorilla_overlay::direct::default_lanes),
            nat: {
                let default = zorilla_overlay::config::NatConfig::default();
                zorilla_overlay::config::NatConfig {
                    relay_server: config.relay_max_reservations != Some(0),
                    relay_max_reservations: config
                        .relay_max_reservations
                        .unwrap_or(default.relay_max_reservations),
                    relay_circuit_duration: config.relay_circuit_secs.map_or(
                        default.relay_circuit_duration,
                        std::time::Duration::from_secs,
                    ),
                    relay_circuit_bytes: config
                        .relay_circuit_mib
                        .map_or(default.relay_circuit_bytes, |m| m.saturating_mul(1 << 20)),
                    ..default
                }
            },
            ..OverlayConfig::default()
        };
        let overlay = OverlayConfig {
            grid: closed_grid(config, &state_dir)?,
            ..overlay
        };
        overlay.validate().map_err(config::ConfigError::from)?;
        // Configured, or measured once and kept in the state directory: the
        // figure the scheduler's offers carry. Last, so that a setting
        // refused at start says one sentence and nothing else.
        let cpu_speed = crate::cpuspeed::resolve(config.cpu_speed, &state_dir)?;
        let scheduler = SchedulerConfig {
            speed: cpu_speed.figure,
            ..scheduler
        };
        Ok(Daemon {
            state_dir,
            resources,
            scheduler,
            overlay,
            client,
            web,
            token,
            max_clients: config
                .max_clients
                .unwrap_or(crate::server::DEFAULT_MAX_CLIENTS)
                .max(1),
            worker_time: WorkerTimeCaps::from_config(config),
            finished_in_memory,
            store_cache_bytes,
            checkpoints,
            site: config.site.clone(),
            cpu_speed,
            grid_view,
            native_read_only: match &config.native_read_only {
                Some(paths) => paths.clone(),
                None => config::DEFAULT_NATIVE_READ_ONLY
                    .iter()
                    .map(PathBuf::from)
                    .collect(),
            },
            native_pmi_library: match &config.native_pmi_library {
                Some(path) => Some(path.clone()),
                None => Some(PathBuf::from(config::DEFAULT_NATIVE_PMI_LIBRARY))
                    .filter(|path| path.is_file()),
            },
        })
    }
}

/// The one line a node prints to stdout once it is ready:
/// `zorilla-node ready peer=<id> client=<addr> listen=<addrs> web=http://<addr>/`,
/// and its parser, for programs that start nodes (the demo, the tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyLine {
    /// The node's peer id.
    pub peer: String,
    /// Its client-protocol address.
    pub client: String,
    /// Its overlay listen addresses.
    pub listen: Vec<String>,
    /// Its status page's URL.
    pub web: String,
}

impl std::fmt::Display for ReadyLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} peer={} client={} listen={} web={}",
            Self::PREFIX,
            self.peer,
            self.client,
            self.listen.join(","),
            self.web
        )
    }
}

impl ReadyLine {
    /// How the line starts.
    pub const PREFIX: &str = "zorilla-node ready";

    /// Parses a ready line; `None` for any other line.
    pub fn parse(line: &str) -> Option<ReadyLine> {
        let rest = line.strip_prefix(Self::PREFIX)?;
        let field = |name: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(ReadyLine {
            peer: field("peer")?,
            client: field("client")?,
            listen: field("listen")?.split(',').map(str::to_string).collect(),
            web: field("web")?,
        })
    }

    /// Reads a starting node's stdout until its ready line, for at most
    /// `timeout`; the rest of its output is drained (and dropped) by a
    /// thread so that the node never blocks on a full pipe. `None` if the
    /// node exited or took too long.
    pub fn wait(stdout: std::process::ChildStdout, timeout: Duration) -> Option<ReadyLine> {
        use std::io::BufRead;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(ready) = ReadyLine::parse(&line) {
                    let _ = tx.try_send(ready);
                }
            }
        });
        rx.recv_timeout(timeout).ok()
    }
}

/// Runs a node until `shutdown` resolves. Prints its [`ReadyLine`] to
/// stdout once it is ready.
pub async fn run(
    mut daemon: Daemon,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let store = Arc::new(Store::open_with_cache(
        &daemon.state_dir.join("state.redb"),
        daemon.store_cache_bytes,
    )?);
    let resources = daemon.resources;
    let sandbox = {
        let mut config = SandboxConfig::new(daemon.state_dir.join("cache"));
        config.caps = Limits {
            memory_bytes: resources.memory_mib.saturating_mul(1024 * 1024),
            disk_bytes: resources.disk_mib.saturating_mul(1024 * 1024),
            cpu_time: daemon.worker_time.cpu,
            wall_time: daemon.worker_time.wall,
            ..Limits::default()
        };
        // What the node offers holds for all its workers together, as well
        // as for each.
        config.disk_bytes = resources.disk_mib.saturating_mul(1024 * 1024);
        // Slots are reserved up front: a few more than the cores, since
        // workers blocked on messages use no core.
        config.max_workers = resources.cores.max(1) * 2 + 2;
        Sandbox::new(config)?
    };
    // Native workers, if the owner runs anyone's: only where the kernel's
    // sandbox holds, with the same caps as WebAssembly workers'.
    let native = if daemon.scheduler.limits.native.users.is_empty() {
        None
    } else {
        let caps = sandbox.config().caps;
        let read_only = daemon.native_read_only.clone();
        let pmi_library = daemon.native_pmi_library.clone();
        match tokio::task::spawn_blocking(move || {
            crate::native::probe(caps, read_only, pmi_library)
        })
        .await?
        {
            Ok(native) => {
                tracing::info!(
                    "native jobs of {} users run here, in control groups {}; {}",
                    daemon.scheduler.limits.native.users.len(),
                    native.sandbox.describe(),
                    match &native.pmi_library {
                        Some(path) => format!("MPI programs run through {}", path.display()),
                        None => format!(
                            "Open MPI programs cannot wire up, and MPICH jobs of 3 ranks or more may hang as they end \
                             (no library for MPI ranks at {}: deploy/install.sh --native builds it)",
                            config::DEFAULT_NATIVE_PMI_LIBRARY
                        ),
                    }
                );
                daemon.scheduler.limits.native.sandbox = true;
                Some(native)
            }
            Err(e) => {
                tracing::warn!("{e}: native jobs are declined");
                None
            }
        }
    };
    let (overlay, events) = Overlay::start(daemon.overlay.clone()).await?;
    let peer = overlay.local_peer_id();
    let listener = TcpListener::bind(daemon.client)
        .await
        .with_context(|| format!("cannot listen for clients on {}", daemon.client))?;
    let client_addr = listener.local_addr()?;
    let _ = std::fs::write(
        daemon.state_dir.join("client.addr"),
        client_addr.to_string(),
    );
    let listen = overlay.listen_addrs().await?;
    let status = NodeStatus::new(
        overlay.clone(),
        daemon.overlay.network.clone(),
        daemon.overlay.grid.as_ref().map(grid_info),
        daemon.site.clone(),
        resources,
        daemon.cpu_speed,
        store.clone(),
    );
    let web_config = zorilla_webui::WebConfig {
        listen: daemon.web,
        token: daemon.token.clone(),
        grid: daemon.grid_view,
        ..zorilla_webui::WebConfig::default()
    };
    let web_addr = zorilla_webui::serve(web_config, status.clone())
        .await
        .context("cannot start the status page")?;
    let _ = std::fs::write(daemon.state_dir.join("web.addr"), web_addr.to_string());
    let poller = tokio::spawn(crate::status::poll_overlay(status.clone()));
    let (commands_tx, commands) = mpsc::channel(64);
    let primaries = crate::forward::Primaries::default();
    let sessions = crate::owner::SharedSessions::default();
    let (activity, activity_rx) = watch::channel(0u64);
    let server = tokio::spawn(crate::server::serve(
        listener,
        ServerConfig {
            commands: commands_tx,
            sandbox: sandbox.clone(),
            overlay: overlay.clone(),
            network: daemon.overlay.network.clone(),
            grid: daemon.overlay.grid.as_ref().map(grid_info),
            token: daemon.token.clone(),
            max_clients: daemon.max_clients,
            started: Instant::now(),
            activity: activity_rx,
            store: store.clone(),
            primaries: primaries.clone(),
            lookups: crate::forward::Lookups::default(),
            sessions: sessions.clone(),
        },
    ));
    tracing::info!(%peer, %client_addr, ?listen, %web_addr, %resources, "node ready");
    let ready = ReadyLine {
        peer: peer.to_string(),
        client: client_addr.to_string(),
        listen: listen.iter().map(|a| a.to_string()).collect(),
        web: format!("http://{web_addr}/"),
    };
    println!("{ready}");
    // systemd (Type=notify): ready now; a no-op without $NOTIFY_SOCKET.
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!(
            "peer {peer}, client {client_addr}, web http://{web_addr}/"
        )),
    ]);
    let shutdown = async {
        shutdown.await;
        notify(&[sd_notify::NotifyState::Stopping]);
    };
    let parts = Parts {
        overlay: overlay.clone(),
        events,
        commands,
        sched: daemon.scheduler,
        store,
        sandbox,
        native,
        dir: daemon.state_dir,
        finished_in_memory: daemon.finished_in_memory,
        checkpoints: daemon.checkpoints,
        activity,
        status: Publisher::new(status),
        primaries,
        sessions,
        vouched_by: daemon
            .overlay
            .grid
            .as_ref()
            .map(|grid| grid.credential.inviter().map_or(peer, |i| i.body().member)),
    };
    Node::run(parts, shutdown).await;
    server.abort();
    poller.abort();
    overlay.shutdown().await;
    tracing::info!("node stopped");
    Ok(())
}

/// Tells the service manager (systemd, `Type=notify`) about a state
/// change. A failure is logged, not fatal: at worst systemd times the start
/// out, which says more than a node that refuses to run.
fn notify(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

/// The key of the user id `text` (as `zorilla whoami` prints it), from
/// configuration setting `field`.
fn user(field: &str, text: &str) -> anyhow::Result<PeerId> {
    text.parse::<crate::owner::UserId>()
        .map(|u| u.key())
        .map_err(|e| anyhow::anyhow!("{field}: {e}"))
}

/// The users of the config's list `field` (absent: none).
fn user_set(field: &'static str, list: Option<&Vec<String>>) -> anyhow::Result<BTreeSet<PeerId>> {
    list.into_iter()
        .flatten()
        .map(|text| user(field, text))
        .collect()
}

/// Whose jobs this node runs and each user's limits, from the
/// configuration (user ids checked: a typo must not let nobody in, or
/// everybody).
fn user_policy(config: &Config) -> anyhow::Result<UserPolicy<PeerId>> {
    let only = match &config.users {
        None => None,
        Some(list) => Some(user_set("users", Some(list))?),
    };
    let each = UserLimits {
        max_cores: config.user_max_cores.unwrap_or(u32::MAX),
        max_jobs: config.user_max_jobs.unwrap_or(u32::MAX),
    };
    let mut named = BTreeMap::new();
    for (id, limits) in config.user_limits.iter().flatten() {
        named.insert(
            user("user_limits", id)?,
            UserLimits {
                max_cores: limits.max_cores.unwrap_or(each.max_cores),
                max_jobs: limits.max_jobs.unwrap_or(each.max_jobs),
            },
        );
    }
    let first = user_set("own_users", config.own_users.as_ref())?;
    Ok(UserPolicy {
        only,
        each,
        named,
        first,
    })
}

/// Which native jobs the node runs: those of the users the owner lists,
/// for this machine's architecture. Whether the node can sandbox them is
/// found out when it starts.
fn native_policy(config: &Config) -> anyhow::Result<NativePolicy<PeerId>> {
    let users = user_set("native_users", config.native_users.as_ref())?;
    for path in config.native_read_only.iter().flatten() {
        zorilla_sandbox::native::check_read_only(path)
            .map_err(|e| anyhow::anyhow!("native_read_only: {e}"))?;
    }
    if let Some(path) = &config.native_pmi_library {
        if !path.is_absolute() || !path.is_file() {
            anyhow::bail!(
                "native_pmi_library: {} is not an absolute path to a file",
                path.display()
            );
        }
        zorilla_sandbox::native::check_read_only(path)
            .map_err(|e| anyhow::anyhow!("native_pmi_library: {e}"))?;
    }
    Ok(NativePolicy {
        users,
        arch: crate::native::this_arch(),
        sandbox: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path) -> Config {
        Config {
            state_dir: Some(dir.to_owned()),
            mdns: Some(false),
            ..Config::default()
        }
    }

    #[test]
    fn the_ready_line_parses_what_it_prints() {
        let ready = ReadyLine {
            peer: "12D3Koo".into(),
            client: "127.0.0.1:4100".into(),
            listen: vec!["/ip4/127.0.0.1/tcp/1".into(), "/ip4/127.0.0.2/tcp/2".into()],
            web: "http://127.0.0.1:4180/".into(),
        };
        assert_eq!(ReadyLine::parse(&ready.to_string()), Some(ready));
        assert_eq!(ReadyLine::parse("zorilla-node starting"), None);
        assert_eq!(ReadyLine::parse("zorilla-node ready peer=x"), None);
    }

    #[test]
    fn off_loopback_addresses_need_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let open = Config {
            client: Some("0.0.0.0:4100".parse().unwrap()),
            ..config(dir.path())
        };
        let err = Daemon::from_config(&open).unwrap_err().to_string();
        assert!(err.contains("needs a token"), "{err}");
        let open_web = Config {
            web: Some("0.0.0.0:8080".parse().unwrap()),
            ..config(dir.path())
        };
        assert!(Daemon::from_config(&open_web).is_err());
        let with_token = Config {
            token: Some("0123456789abcdef".into()),
            ..open
        };
        let daemon = Daemon::from_config(&with_token).unwrap();
        assert_eq!(daemon.token.as_deref(), Some("0123456789abcdef"));
        // A short or blank token is refused, whatever the addresses.
        for bad in ["s3cret", " ", "                    "] {
            let short = Config {
                token: Some(bad.into()),
                ..config(dir.path())
            };
            let err = Daemon::from_config(&short).unwrap_err().to_string();
            assert!(err.starts_with("the token must"), "{err}");
        }
        // Loopback needs none.
        assert!(
            Daemon::from_config(&config(dir.path()))
                .unwrap()
                .token
                .is_none()
        );
    }

    #[test]
    fn max_connections_reaches_the_overlay_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let default = Daemon::from_config(&config(dir.path())).unwrap();
        assert_eq!(
            default.overlay.max_connections,
            zorilla_overlay::config::DEFAULT_MAX_CONNECTIONS
        );
        let small = Config {
            max_connections: Some(12),
            ..config(dir.path())
        };
        assert_eq!(
            Daemon::from_config(&small).unwrap().overlay.max_connections,
            12
        );
        // No room for the six neighbours.
        let tiny = Config {
            max_connections: Some(6),
            ..config(dir.path())
        };
        let err = Daemon::from_config(&tiny).unwrap_err().to_string();
        assert!(err.contains("max_connections"), "{err}");
    }

    /// What an owner lists for native workers to read is checked when the
    /// node starts, against what the sandbox can show: a library under
    /// `/tmp` (which each worker's sandbox replaces) or a relative path is
    /// refused with the setting's name, not when a rank starts.
    #[test]
    fn native_paths_the_sandbox_cannot_show_are_refused_at_start() {
        let dir = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let library = dir.path().join("libzorilla-pmi.so");
        std::fs::write(&library, b"").unwrap();
        let under_tmp = Config {
            native_pmi_library: Some(library),
            ..config(dir.path())
        };
        let err = Daemon::from_config(&under_tmp).unwrap_err().to_string();
        assert!(
            err.contains("native_pmi_library") && err.contains("cannot be shown"),
            "{err}"
        );
        for bad in ["usr/lib", "/usr/../etc", "/proc/self", "/"] {
            let listed = Config {
                native_read_only: Some(vec![bad.into()]),
                ..config(dir.path())
            };
            let err = Daemon::from_config(&listed).unwrap_err().to_string();
            assert!(err.contains("native_read_only"), "{bad}: {err}");
        }
        let fine = Config {
            native_read_only: Some(vec!["/usr".into(), "/opt/mpich".into()]),
            ..config(dir.path())
        };
        assert!(Daemon::from_config(&fine).is_ok());
    }

    /// `quic = true` reaches the overlay where QUIC is built in, and is
    /// refused with one sentence where it is not (checked in both builds:
    /// `--no-default-features` leaves it out).
    #[test]
    fn quic_is_taken_only_where_built_in() {
        let dir = tempfile::tempdir().unwrap();
        let quic = Config {
            quic: Some(true),
            ..config(dir.path())
        };
        let taken = Daemon::from_config(&quic);
        if zorilla_overlay::QUIC_SUPPORTED {
            assert!(taken.unwrap().overlay.quic);
        } else {
            assert_eq!(
                taken.unwrap_err().to_string(),
                format!("invalid configuration: {}", config::NO_QUIC)
            );
        }
        // Off, or not said: every build starts, without QUIC.
        for off in [Some(false), None] {
            let daemon = Daemon::from_config(&Config {
                quic: off,
                ..config(dir.path())
            })
            .unwrap();
            assert!(!daemon.overlay.quic);
        }
    }
}
