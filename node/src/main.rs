//! `zorilla-node`: the daemon every machine of a Zorilla grid runs.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use zorilla_node::config::Config;
use zorilla_node::{Daemon, run};

/// Runs a Zorilla node. Every option can also be given in the TOML config
/// file or as a ZORILLA_* environment variable; flags win over the
/// environment, which wins over the file.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<NodeCommand>,
    /// TOML configuration file.
    #[arg(long, env = "ZORILLA_CONFIG")]
    config: Option<PathBuf>,
    /// State directory (identity, database, caches).
    #[arg(long, env = "ZORILLA_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Network name.
    #[arg(long, env = "ZORILLA_NETWORK")]
    network: Option<String>,
    /// Overlay listen multiaddress (repeatable).
    #[arg(long, env = "ZORILLA_LISTEN", value_delimiter = ',')]
    listen: Vec<String>,
    /// Client protocol address.
    #[arg(long, env = "ZORILLA_CLIENT")]
    client: Option<SocketAddr>,
    /// Peer multiaddress to join through (repeatable).
    #[arg(long = "peer", env = "ZORILLA_PEERS", value_delimiter = ',')]
    peers: Vec<String>,
    /// Discover peers with mDNS.
    #[arg(long, env = "ZORILLA_MDNS")]
    mdns: Option<bool>,
    /// The most overlay connections open at once.
    #[arg(long, env = "ZORILLA_MAX_CONNECTIONS")]
    max_connections: Option<u32>,
    /// Listen on QUIC too, beside TCP.
    #[arg(long, env = "ZORILLA_QUIC")]
    quic: Option<bool>,
    /// Messages between workers over direct TLS connections (default true).
    #[arg(long, env = "ZORILLA_DIRECT_RANKS")]
    direct_ranks: Option<bool>,
    /// Lanes (extra direct connections for large messages) beside each
    /// direct connection to a peer (default 2 on a machine of 4 cores or
    /// more, else 0; at most 4; 0: none).
    #[arg(long, env = "ZORILLA_RANK_LANES")]
    rank_lanes: Option<u8>,
    /// Nodes this node relays for at most (0: it relays for none).
    #[arg(long, env = "ZORILLA_RELAY_MAX_RESERVATIONS")]
    relay_max_reservations: Option<usize>,
    /// Seconds a relayed circuit through this node lasts at most.
    #[arg(long, env = "ZORILLA_RELAY_CIRCUIT_SECS")]
    relay_circuit_secs: Option<u64>,
    /// MiB a relayed circuit through this node carries at most.
    #[arg(long, env = "ZORILLA_RELAY_CIRCUIT_MIB")]
    relay_circuit_mib: Option<u64>,
    /// Cores offered to jobs.
    #[arg(long, env = "ZORILLA_CORES")]
    cores: Option<u32>,
    /// Memory offered to jobs, MiB.
    #[arg(long, env = "ZORILLA_MEMORY_MIB")]
    memory_mib: Option<u64>,
    /// Disk offered to jobs, MiB.
    #[arg(long, env = "ZORILLA_DISK_MIB")]
    disk_mib: Option<u64>,
    /// Relative CPU speed of this machine (1000: the reference machine);
    /// measured at the first start and kept in the state directory if not
    /// given.
    #[arg(long, env = "ZORILLA_CPU_SPEED")]
    cpu_speed: Option<u32>,
    /// J: jobs with workers here at once.
    #[arg(long, env = "ZORILLA_MAX_JOBS")]
    max_jobs: Option<u32>,
    /// P: workers of one job here.
    #[arg(long, env = "ZORILLA_MAX_WORKERS_PER_JOB")]
    max_workers_per_job: Option<u32>,
    /// CPU seconds one worker may use at most (0: no cap).
    #[arg(long, env = "ZORILLA_MAX_CPU_TIME_SECS")]
    max_cpu_time_secs: Option<u64>,
    /// Wall-clock seconds one worker may run at most (0: no cap).
    #[arg(long, env = "ZORILLA_MAX_WALL_TIME_SECS")]
    max_wall_time_secs: Option<u64>,
    /// Peer id of a home whose jobs never run here (repeatable).
    #[arg(long, env = "ZORILLA_DENY", value_delimiter = ',')]
    deny: Vec<String>,
    /// User id whose jobs run here (repeatable; default: any member's).
    #[arg(long = "user", env = "ZORILLA_USERS", value_delimiter = ',')]
    users: Vec<String>,
    /// User id whose native jobs run here (repeatable; default: none).
    #[arg(
        long = "native-user",
        env = "ZORILLA_NATIVE_USERS",
        value_delimiter = ','
    )]
    native_users: Vec<String>,
    /// The PMI-1 library for Open MPI programs run as native jobs
    /// (default: /usr/local/lib/zorilla/libzorilla-pmi.so, if there).
    #[arg(long, env = "ZORILLA_NATIVE_PMI_LIBRARY")]
    native_pmi_library: Option<PathBuf>,
    /// User id of the owner's own users, whose waiting jobs get freed
    /// cores first (repeatable; default: none).
    #[arg(long = "own-user", env = "ZORILLA_OWN_USERS", value_delimiter = ',')]
    own_users: Vec<String>,
    /// Cores of one user's workers here at once.
    #[arg(long, env = "ZORILLA_USER_MAX_CORES")]
    user_max_cores: Option<u32>,
    /// Jobs of one user with workers here at once.
    #[arg(long, env = "ZORILLA_USER_MAX_JOBS")]
    user_max_jobs: Option<u32>,
    /// Emulated-latency topology file.
    #[arg(long, env = "ZORILLA_TOPOLOGY")]
    topology: Option<PathBuf>,
    /// Where this machine is (a site's name): the status page's grid view
    /// groups nodes by it; with a topology, this node's site in it.
    #[arg(long, env = "ZORILLA_SITE")]
    site: Option<String>,
    /// Status page address.
    #[arg(long, env = "ZORILLA_WEB")]
    web: Option<SocketAddr>,
    /// The most peers the status page's grid view asks (0 to 256; default 32).
    #[arg(long, env = "ZORILLA_GRID_VIEW_PEERS")]
    grid_view_peers: Option<usize>,
    /// Secret that every client and browser must then present, on loopback
    /// too. Required when the client or web address is not on loopback (the
    /// node refuses to start without one). At least 16 bytes, not only
    /// whitespace (e.g. `openssl rand -hex 32`).
    #[arg(long, env = "ZORILLA_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The most client connections at once.
    #[arg(long, env = "ZORILLA_MAX_CLIENTS")]
    max_clients: Option<usize>,
    /// Finished home jobs kept in memory, the newest (older ones are read
    /// from the store).
    #[arg(long, env = "ZORILLA_FINISHED_IN_MEMORY")]
    finished_in_memory: Option<usize>,
    /// The database's page cache, KiB.
    #[arg(long, env = "ZORILLA_STORE_CACHE_KIB")]
    store_cache_kib: Option<u64>,
    /// The largest checkpoint of a worker here, MiB (1 to 256).
    #[arg(long, env = "ZORILLA_CHECKPOINT_MAX_MIB")]
    checkpoint_max_mib: Option<u64>,
    /// On how many other nodes a worker's checkpoint is kept (1 to 8).
    #[arg(long, env = "ZORILLA_CHECKPOINT_REPLICAS")]
    checkpoint_replicas: Option<usize>,
    /// Other nodes' checkpoints kept here, MiB.
    #[arg(long, env = "ZORILLA_CHECKPOINT_STORE_MIB")]
    checkpoint_store_mib: Option<u64>,
    /// A closed grid: this node's membership credential file.
    #[arg(long, env = "ZORILLA_CREDENTIAL")]
    credential: Option<PathBuf>,
    /// The closed grid's public key (64 hex digits); optional, the
    /// credential names it.
    #[arg(long, env = "ZORILLA_GRID_KEY")]
    grid_key: Option<String>,
    /// Log filter (tracing's env-filter syntax); RUST_LOG wins if set.
    #[arg(long, env = "ZORILLA_LOG", default_value = "info")]
    log: String,
}

/// What `zorilla-node` does instead of running a node.
#[derive(Debug, Subcommand)]
enum NodeCommand {
    /// Print this node's peer id (made, with its identity key, in the state
    /// directory if there is none yet): what a credential names.
    Id,
    /// Closed grids: make the grid key, credentials and revocations.
    #[command(subcommand)]
    Grid(GridCommand),
}

#[derive(Debug, Subcommand)]
enum GridCommand {
    /// Make a new grid key (keep the file offline: whoever holds it
    /// decides who joins) and print its public key for the nodes' config.
    Init {
        /// Where to write the secret key (mode 0600; never overwritten).
        #[arg(long, default_value = "grid.key")]
        key: PathBuf,
    },
    /// Issue a credential for a node, signed by the grid key.
    Issue {
        /// The grid key file.
        #[arg(long, default_value = "grid.key")]
        key: PathBuf,
        /// The node's peer id (`zorilla-node id` on that node prints it).
        #[arg(long)]
        peer: String,
        /// Days until it expires.
        #[arg(long, default_value_t = 365)]
        days: u64,
        /// Let the node invite others (issue credentials with its own key).
        #[arg(long)]
        may_invite: bool,
        /// Where to write it.
        #[arg(long)]
        out: PathBuf,
    },
    /// Invite a node: issue it a credential signed by this node's identity
    /// key, under this node's own credential (which must let it invite).
    Invite {
        /// This node's credential.
        #[arg(long)]
        credential: PathBuf,
        /// The invited node's peer id.
        #[arg(long)]
        peer: String,
        /// Days until it expires (at most when this node's does).
        #[arg(long, default_value_t = 365)]
        days: u64,
        /// Where to write it.
        #[arg(long)]
        out: PathBuf,
    },
    /// Revoke a node (by peer id) or one credential (by its file), signed
    /// by the grid key; hand the file to any node with `zorilla revoke`.
    Revoke {
        /// The grid key file.
        #[arg(long, default_value = "grid.key")]
        key: PathBuf,
        /// Every credential of this peer id.
        #[arg(
            long,
            conflicts_with = "credential",
            required_unless_present = "credential"
        )]
        peer: Option<String>,
        /// This credential only.
        #[arg(long)]
        credential: Option<PathBuf>,
        /// Where to write the revocation.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs a `zorilla-node` command other than the node itself.
fn node_command(command: &NodeCommand, state_dir: &std::path::Path) -> anyhow::Result<()> {
    use zorilla_overlay::membership::credential::unix_now;
    use zorilla_overlay::membership::{Credential, GridKey, RevocationTarget};
    let peer = |text: &str| -> anyhow::Result<zorilla_overlay::PeerId> {
        text.parse()
            .map_err(|e| anyhow::anyhow!("{text:?} is not a peer id: {e}"))
    };
    let expiry = |days: u64| unix_now().saturating_add(days.saturating_mul(86_400));
    match command {
        NodeCommand::Id => {
            let key = zorilla_overlay::identity::load_or_create(state_dir)?;
            println!("{}", key.public().to_peer_id());
        }
        NodeCommand::Grid(GridCommand::Init { key }) => {
            let grid = GridKey::generate();
            grid.save(key)?;
            println!(
                "grid key written to {} (keep it offline)\ngrid_key = \"{}\"   # fingerprint {}",
                key.display(),
                grid.public(),
                grid.public().fingerprint()
            );
        }
        NodeCommand::Grid(GridCommand::Issue {
            key,
            peer: member,
            days,
            may_invite,
            out,
        }) => {
            let grid = GridKey::load(key)?;
            let credential = grid.issue(peer(member)?, expiry(*days), *may_invite);
            credential.save(out)?;
            println!(
                "credential {} for {member} written to {} (expires in {days} days{})",
                credential.id(),
                out.display(),
                if *may_invite { ", may invite" } else { "" }
            );
        }
        NodeCommand::Grid(GridCommand::Invite {
            credential,
            peer: member,
            days,
            out,
        }) => {
            let own = Credential::load(credential)?;
            let key = zorilla_overlay::identity::load_or_create(state_dir)?;
            let invited = own.invite(&key, peer(member)?, expiry(*days))?;
            invited.save(out)?;
            println!(
                "credential {} for {member} written to {}",
                invited.id(),
                out.display()
            );
        }
        NodeCommand::Grid(GridCommand::Revoke {
            key,
            peer: revoked,
            credential,
            out,
        }) => {
            let grid = GridKey::load(key)?;
            let (target, until) = match (revoked, credential) {
                (Some(p), _) => (RevocationTarget::Peer(peer(p)?), u64::MAX),
                (None, Some(file)) => {
                    let credential = Credential::load(file)?;
                    (
                        RevocationTarget::Credential(credential.id()),
                        credential.body().expires,
                    )
                }
                (None, None) => anyhow::bail!("give --peer or --credential"),
            };
            let revocation = grid.revoke(target, until);
            revocation.save(out)?;
            println!(
                "revocation of {target} written to {}: hand it to a node with `zorilla revoke {}`",
                out.display(),
                out.display()
            );
        }
    }
    Ok(())
}

impl Cli {
    fn overrides(&self) -> Config {
        let list = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        Config {
            state_dir: self.state_dir.clone(),
            network: self.network.clone(),
            listen: list(&self.listen),
            client: self.client,
            peers: list(&self.peers),
            mdns: self.mdns,
            max_connections: self.max_connections,
            quic: self.quic,
            direct_ranks: self.direct_ranks,
            rank_lanes: self.rank_lanes,
            relay_max_reservations: self.relay_max_reservations,
            relay_circuit_secs: self.relay_circuit_secs,
            relay_circuit_mib: self.relay_circuit_mib,
            cores: self.cores,
            memory_mib: self.memory_mib,
            disk_mib: self.disk_mib,
            cpu_speed: self.cpu_speed,
            max_jobs: self.max_jobs,
            max_workers_per_job: self.max_workers_per_job,
            max_cpu_time_secs: self.max_cpu_time_secs,
            max_wall_time_secs: self.max_wall_time_secs,
            deny: list(&self.deny),
            users: list(&self.users),
            user_max_cores: self.user_max_cores,
            user_max_jobs: self.user_max_jobs,
            user_limits: None,
            own_users: list(&self.own_users),
            native_users: list(&self.native_users),
            native_read_only: None,
            native_pmi_library: self.native_pmi_library.clone(),
            topology: self.topology.clone(),
            site: self.site.clone(),
            web: self.web,
            grid_view_peers: self.grid_view_peers,
            token: self.token.clone(),
            max_clients: self.max_clients,
            finished_in_memory: self.finished_in_memory,
            store_cache_kib: self.store_cache_kib,
            checkpoint_max_mib: self.checkpoint_max_mib,
            checkpoint_replicas: self.checkpoint_replicas,
            checkpoint_store_mib: self.checkpoint_store_mib,
            credential: self.credential.clone(),
            grid_key: self.grid_key.clone(),
        }
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed by this call,
/// not when the future is first polled (the event loop polls it only after
/// the node reported ready): a SIGTERM right after READY=1, say an
/// immediate `systemctl stop`, must stop the node gracefully, not kill it.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutdown signal received");
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown signal received");
    })
}

/// The first argument that makes `zorilla-node` the helper that puts a
/// native worker into its sandbox (see `zorilla_sandbox::native`): the
/// node starts itself so for each native worker.
const NATIVE_INIT: &str = zorilla_node::native::INIT_ARG;

fn main() -> anyhow::Result<()> {
    // First, while the process has one thread: the helper forks.
    if std::env::args_os().nth(1).is_some_and(|a| a == NATIVE_INIT) {
        zorilla_sandbox::native::init_main_with(std::env::args_os().skip(2));
    }
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    // Under systemd (journald) the journal adds its own timestamps.
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    // Colours only for a person at a terminal: a log file or a pipe gets
    // plain text (and NO_COLOR turns them off everywhere).
    let colour = !journald
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    if journald {
        builder.without_time().init();
    } else {
        builder.init();
    }
    let file = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let config = file.overridden_by(cli.overrides());
    if let Some(command) = &cli.command {
        return node_command(command, &config.state_dir());
    }
    let daemon = Daemon::from_config(&config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async { run(daemon, shutdown_signal()?).await })
}
