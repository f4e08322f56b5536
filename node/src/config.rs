//! The node's configuration: a TOML file whose every field is optional and
//! documented here, with named defaults, overridden by command-line flags
//! and `ZORILLA_*` environment variables (see `zorilla-node --help`).
//!
//! ```toml
//! state_dir = "/var/lib/zorilla"      # default: $STATE_DIRECTORY or the user's data dir
//! network = "physics-lab"            # nodes only talk to nodes of the same network
//! listen = ["/ip4/0.0.0.0/tcp/4001"] # overlay addresses (default: port chosen by the OS)
//! client = "127.0.0.1:4100"          # client protocol (default: 127.0.0.1, port chosen)
//! peers = ["/ip4/192.0.2.7/tcp/4001"]
//! mdns = true
//! max_connections = 128              # overlay connections at once
//! quic = false                       # listen on QUIC too, beside TCP (cargo feature `quic`)
//! direct_ranks = true                # messages between workers over direct TLS connections
//! rank_lanes = 2                     # extra direct connections per peer for large messages (0-4; default 2 with 4 cores or more, else 0)
//! relay_max_reservations = 16        # nodes this node relays for (behind NATs)
//! relay_circuit_secs = 3600          # longest relayed circuit through this node
//! relay_circuit_mib = 1024           # most data of one relayed circuit
//! cores = 4                          # offered to jobs (default: detected)
//! memory_mib = 8192                  # offered to jobs (default: detected)
//! disk_mib = 10000                   # offered to jobs (default: free disk of state_dir)
//! cpu_speed = 1500                   # relative CPU speed, 1000 = reference (default: measured)
//! max_jobs = 16                      # J: jobs with workers here at once
//! max_workers_per_job = 8            # P: workers of one job here
//! max_cpu_time_secs = 3600           # CPU time per worker (default: no cap)
//! max_wall_time_secs = 86400         # wall-clock time per worker (default: no cap)
//! deny = ["12D3Koo..."]              # homes whose jobs never run here
//! users = ["12D3Koo..."]             # only these users' jobs run here (`zorilla whoami`; default: any member's)
//! user_max_cores = 8                 # cores of one user's workers here at once (default: no cap)
//! user_max_jobs = 4                  # jobs of one user with workers here at once (default: no cap)
//! user_limits."12D3Koo..." = { max_cores = 16, max_jobs = 8 }  # one user's own
//! own_users = ["12D3Koo..."]         # the owner's own users: first to get cores that free up
//! native_users = ["12D3Koo..."]      # users whose native jobs run here (default: none)
//! native_read_only = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/sys"]  # what native workers may read (the default)
//! native_pmi_library = "/usr/local/lib/zorilla/libzorilla-pmi.so"  # library for native MPI ranks (the default, if there)
//! topology = "sites.toml"            # emulated latency (tests, demos)
//! site = "amsterdam"                  # grid view's group; the topology's site
//! web = "127.0.0.1:8080"              # status page (default: 127.0.0.1, port chosen)
//! grid_view_peers = 32               # peers the status page's grid view asks
//! token = "long-random-secret"       # at least 16 bytes; then asked of every client; required off loopback
//! max_clients = 128                  # client connections at once
//! finished_in_memory = 500           # newest finished home jobs kept in memory
//! store_cache_kib = 4096             # the database's page cache
//! checkpoint_max_mib = 256           # largest checkpoint of a worker here
//! checkpoint_replicas = 2            # other nodes that keep each checkpoint
//! checkpoint_store_mib = 2048        # checkpoints kept here for other nodes
//! credential = "/etc/zorilla/member.cred"  # closed grid: this node's credential (default: open grid)
//! grid_key = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"  # closed grid's key
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Default overlay listen address: every interface, port chosen by the OS.
pub const DEFAULT_LISTEN: &str = "/ip4/0.0.0.0/tcp/0";
/// Default client address: loopback only, port chosen by the OS (printed,
/// and written to `client.addr` in the state directory).
pub const DEFAULT_CLIENT: &str = "127.0.0.1:0";
/// Default status page address: loopback only, port chosen by the OS
/// (printed, and written to `web.addr` in the state directory).
pub const DEFAULT_WEB: &str = "127.0.0.1:0";
/// What native workers may read besides their job directory, unless the
/// owner says otherwise: the system's programs and libraries and its
/// configuration (for the dynamic loader, users and names).
pub const DEFAULT_NATIVE_READ_ONLY: [&str; 7] = zorilla_sandbox::native::SYSTEM_PATHS;

/// Where `deploy/install.sh --native` puts the library for native MPI
/// ranks (see [`Config::native_pmi_library`]).
pub const DEFAULT_NATIVE_PMI_LIBRARY: &str = "/usr/local/lib/zorilla/libzorilla-pmi.so";
/// Default network name.
pub const DEFAULT_NETWORK: &str = "default";
/// Default J: jobs with workers on this node at once.
pub const DEFAULT_MAX_JOBS: u32 = 16;
/// Default P: workers of one job on this node.
pub const DEFAULT_MAX_WORKERS_PER_JOB: u32 = 64;
/// Default number of finished home jobs kept in memory (see
/// [`Config::finished_in_memory`]): as many as the status page lists.
pub const DEFAULT_FINISHED_IN_MEMORY: usize = 500;
/// The fewest finished home jobs kept in memory, whatever the
/// configuration says: a job that just ended is still looked up there when
/// its nodes are told it is over.
pub const MIN_FINISHED_IN_MEMORY: usize = 16;
/// The most finished home jobs kept in memory (about 2 KiB each, with the
/// scheduler's report of each).
pub const MAX_FINISHED_IN_MEMORY: usize = 100_000;
/// The largest checkpoint of a worker, MiB (see
/// [`Config::checkpoint_max_mib`]): the default and the most.
pub const MAX_CHECKPOINT_MIB: u64 = zorilla_sandbox::MAX_CHECKPOINT_BYTES >> 20;
/// Default of [`Config::checkpoint_store_mib`].
pub const DEFAULT_CHECKPOINT_STORE_MIB: u64 = 2048;
/// The largest page cache of the database, KiB (1 GiB).
pub const MAX_STORE_CACHE_KIB: u64 = 1024 * 1024;
/// Fraction of the detected memory offered when `memory_mib` is not set.
pub const DEFAULT_MEMORY_SHARE: f64 = 0.5;
/// Fraction of the free disk offered when `disk_mib` is not set.
pub const DEFAULT_DISK_SHARE: f64 = 0.5;

/// The shortest token accepted, in bytes. A token stands between the
/// network and running code on the node, so it must not be guessable: use
/// a long random one (`openssl rand -hex 32` gives 64 characters).
pub const MIN_TOKEN_BYTES: usize = 16;

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Fewer than [`MIN_TOKEN_BYTES`] bytes.
    #[error(
        "the token must be at least {min} bytes long (this one has {0}): use a long random \
         secret such as the output of `openssl rand -hex 32`",
        min = MIN_TOKEN_BYTES
    )]
    TooShort(usize),
    /// Nothing but whitespace.
    #[error(
        "the token must not be only whitespace: use a long random secret such as the output \
         of `openssl rand -hex 32`"
    )]
    Blank,
}

/// Checks a token (from the config file, `--token` or `ZORILLA_TOKEN`): at
/// least [`MIN_TOKEN_BYTES`] bytes and not only whitespace.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    if !token.is_empty() && token.trim().is_empty() {
        return Err(TokenError::Blank);
    }
    if token.len() < MIN_TOKEN_BYTES {
        return Err(TokenError::TooShort(token.len()));
    }
    Ok(())
}

/// Why a node without QUIC refuses `quic = true` (see [`check_quic`]).
pub const NO_QUIC: &str = "this zorilla-node was built without QUIC; rebuild with the `quic` \
                           feature or set quic = false";

/// Checks the `quic` setting (config file, `--quic`, `ZORILLA_QUIC`)
/// against whether this build has QUIC (`built_in`: the cargo feature
/// `quic`, on by default, [`zorilla_overlay::QUIC_SUPPORTED`]). A node
/// without it refuses to start with QUIC asked for rather than run on TCP
/// alone: its operator opened a UDP port and expects peers there.
pub fn check_quic(quic: Option<bool>, built_in: bool) -> Result<(), ConfigError> {
    if quic == Some(true) && !built_in {
        return Err(ConfigError::NoQuic);
    }
    Ok(())
}

/// The node's configuration. Every field may be left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the identity, the database and the module cache live. Default:
    /// `$STATE_DIRECTORY` (systemd), else `<data dir>/zorilla`.
    pub state_dir: Option<PathBuf>,
    /// The grid's name. Default [`DEFAULT_NETWORK`].
    pub network: Option<String>,
    /// Overlay listen multiaddresses. Default [`DEFAULT_LISTEN`].
    pub listen: Option<Vec<String>>,
    /// Client protocol address. Default [`DEFAULT_CLIENT`].
    pub client: Option<SocketAddr>,
    /// Multiaddresses of peers to join through.
    pub peers: Option<Vec<String>>,
    /// Discover peers on the local network with mDNS. Default true.
    pub mdns: Option<bool>,
    /// The most overlay connections open at once; more are refused. An
    /// eighth of them is kept for introducing newcomers (see
    /// `zorilla_overlay::OverlayConfig::max_connections`). Default
    /// [`zorilla_overlay::config::DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: Option<u32>,
    /// Listen on QUIC too (UDP, the listen addresses' IP addresses, a port
    /// chosen by the OS), beside TCP. Default false: the latency emulation
    /// (`topology`) covers TCP only. Needs a build with the cargo feature
    /// `quic` (the default); see [`check_quic`].
    pub quic: Option<bool>,
    /// Messages between workers of different nodes go over direct TLS
    /// connections of their own (AES-GCM, authenticated by the nodes'
    /// identities) where one can be made, else over the overlay's libp2p
    /// connection. Default true; off with a `topology` (its emulated
    /// latency covers libp2p's connections only). See
    /// `zorilla_overlay::direct`.
    pub direct_ranks: Option<bool>,
    /// Lanes beside each direct connection to a peer: further direct
    /// connections that carry chunks of large messages at once. Default
    /// 2, at most 4, 0 for none. See `zorilla_node`'s link module.
    pub rank_lanes: Option<u8>,
    /// How many nodes that are not reachable (behind NATs) this node
    /// relays for at once, when it is reachable itself; 0 relays for none.
    /// Default [`zorilla_overlay::config::DEFAULT_RELAY_MAX_RESERVATIONS`].
    pub relay_max_reservations: Option<usize>,
    /// Seconds a relayed circuit through this node lasts at most. Default
    /// 3600 (libp2p's is 120: too short for a job whose two nodes could
    /// not punch a hole to each other).
    pub relay_circuit_secs: Option<u64>,
    /// MiB a relayed circuit through this node carries at most. Default
    /// 1024 (libp2p's is 128 KiB).
    pub relay_circuit_mib: Option<u64>,
    /// Cores offered to jobs. Default: all detected.
    pub cores: Option<u32>,
    /// Memory offered to jobs, MiB. Default: [`DEFAULT_MEMORY_SHARE`] of
    /// the machine's.
    pub memory_mib: Option<u64>,
    /// Disk offered to jobs, MiB: to all their workers here together (a
    /// write past it fails with ENOSPC), and the most a home keeps of one
    /// job's outputs. Default: [`DEFAULT_DISK_SHARE`] of the state directory's
    /// free space.
    pub disk_mib: Option<u64>,
    /// How fast this machine's cores are against a reference machine's
    /// (1000): a benchmark score of the owner's, 1 to
    /// [`zorilla_core::limits::MAX_SPEED`]. Offers carry it, and among
    /// equally near offers a home prefers idle, then faster machines.
    /// Default: measured at the node's first start (a short calibrated run
    /// on one core) and kept in the state directory (`cpu-speed`).
    pub cpu_speed: Option<u32>,
    /// J: jobs with workers on this node at once. Default
    /// [`DEFAULT_MAX_JOBS`].
    pub max_jobs: Option<u32>,
    /// P: workers of one job on this node. Default
    /// [`DEFAULT_MAX_WORKERS_PER_JOB`].
    pub max_workers_per_job: Option<u32>,
    /// The most CPU time, in seconds, one worker may use; a job asking for
    /// more (or for no limit) gets this. Absent or 0: no cap, a worker runs
    /// as long as its job asks.
    pub max_cpu_time_secs: Option<u64>,
    /// The most wall-clock time, in seconds, one worker may run; a job
    /// asking for more (or for no limit) gets this. Absent or 0: no cap.
    pub max_wall_time_secs: Option<u64>,
    /// Peer ids of homes whose jobs never run here.
    pub deny: Option<Vec<String>>,
    /// User ids (as `zorilla whoami` prints them) whose jobs run here;
    /// absent: any member's (and jobs with no owner). A job of another
    /// user is declined, and its home's report says why.
    pub users: Option<Vec<String>>,
    /// The most cores of one user's workers here at once. Default: no cap.
    pub user_max_cores: Option<u32>,
    /// The most jobs of one user with workers here at once. Default: no cap.
    pub user_max_jobs: Option<u32>,
    /// Limits of particular users (by user id), instead of
    /// `user_max_cores` and `user_max_jobs`.
    pub user_limits: Option<std::collections::BTreeMap<String, UserLimitsConfig>>,
    /// The owner's own users (user ids): when jobs wait for this node's
    /// cores, theirs get the cores that free up before anyone else's.
    pub own_users: Option<Vec<String>>,
    /// User ids whose native jobs (executables for this machine, in the
    /// kernel's sandbox) run here. Absent or empty: no native jobs; every
    /// other user's are declined, and the home's report says why.
    pub native_users: Option<Vec<String>>,
    /// The system paths (absolute) native workers may read, besides their
    /// job directory. Default [`DEFAULT_NATIVE_READ_ONLY`].
    pub native_read_only: Option<Vec<PathBuf>>,
    /// The library for native MPI ranks (built from
    /// `sdk/native/zorilla_pmi.c` and `zorilla_ucx.c`): the PMI-1 client
    /// through which Open MPI programs run as native jobs, and the fix of
    /// MPICH 4.0's `MPI_Finalize` over UCX. Native ranks are shown it,
    /// told where it is, and have it preloaded. Default
    /// [`DEFAULT_NATIVE_PMI_LIBRARY`] if it exists (`deploy/install.sh
    /// --native` builds it there); without one, Open MPI programs cannot
    /// wire up and MPICH jobs of 3 ranks or more may hang as they end.
    pub native_pmi_library: Option<PathBuf>,
    /// Emulated-latency topology file (see `zorilla_overlay::latency`).
    pub topology: Option<PathBuf>,
    /// Where this machine is, in a word (a site, a building): the status
    /// page's grid view groups nodes by it, and with `topology` it is this
    /// node's site there (then required).
    pub site: Option<String>,
    /// Status page address. Default [`DEFAULT_WEB`].
    pub web: Option<SocketAddr>,
    /// The most peers the status page's grid view asks about themselves
    /// (the nearest; 0: this node only). Default
    /// [`zorilla_webui::grid::GridSettings::DEFAULT_MAX_PEERS`], at most
    /// [`zorilla_webui::grid::GridSettings::MOST_PEERS`].
    pub grid_view_peers: Option<usize>,
    /// The secret every client and browser must present once it is set
    /// (on loopback too). Required when the client or web address is not a
    /// loopback address, because an open submit port runs anyone's code. At
    /// least [`MIN_TOKEN_BYTES`] bytes, not all whitespace (see
    /// [`check_token`]); the node refuses to start with a shorter one.
    pub token: Option<String>,
    /// The most client connections at once; more are refused as busy.
    /// Default 128.
    pub max_clients: Option<usize>,
    /// How many finished home jobs the node keeps in memory, the newest:
    /// their records (the status page lists them) and the scheduler's
    /// report of each (a late offer for one hears how it ended). Older ones
    /// are read from the store when asked for, so that a home's memory
    /// does not grow with the jobs it ran. Default
    /// [`DEFAULT_FINISHED_IN_MEMORY`], raised to
    /// [`MIN_FINISHED_IN_MEMORY`]; at most [`MAX_FINISHED_IN_MEMORY`].
    pub finished_in_memory: Option<usize>,
    /// The database's page cache, KiB: pages written or read stay in it,
    /// in memory, until it is full. Default 4096 (4 MiB); at most
    /// [`MAX_STORE_CACHE_KIB`].
    pub store_cache_kib: Option<u64>,
    /// The largest checkpoint a worker on this node may save, MiB: 1 to
    /// [`MAX_CHECKPOINT_MIB`] (the default).
    pub checkpoint_max_mib: Option<u64>,
    /// On how many other nodes a worker's checkpoint is kept: 1 to
    /// [`zorilla_core::checkpoint::MAX_REPLICAS`]; default
    /// [`zorilla_core::checkpoint::DEFAULT_REPLICAS`].
    pub checkpoint_replicas: Option<usize>,
    /// How much of other nodes' checkpoints this node keeps, MiB (half of
    /// it at most for the workers of one node); default
    /// [`DEFAULT_CHECKPOINT_STORE_MIB`]; 0 keeps none.
    pub checkpoint_store_mib: Option<u64>,
    /// A closed grid: this node's membership credential file (made by
    /// `zorilla-node grid issue` or `grid invite` for this node's peer id,
    /// which `zorilla-node id` prints). Every peer must then show one of
    /// the same grid, and this node refuses to start with one that is
    /// expired, revoked or for another peer. Absent: an open grid, which
    /// anyone who can reach a node may join.
    pub credential: Option<PathBuf>,
    /// The closed grid's public key (64 hex digits, printed by
    /// `zorilla-node grid init`). Optional: the credential names it; when
    /// set, a credential of another grid is refused. Needs `credential`.
    pub grid_key: Option<String>,
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not valid.
    #[error("invalid configuration in {path}: {error}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// A node without QUIC asked for it (see [`check_quic`]).
    #[error("invalid configuration: {NO_QUIC}")]
    NoQuic,
    /// The overlay's settings do not hold together.
    #[error("invalid configuration: {0}")]
    Overlay(#[from] zorilla_overlay::ConfigError),
}

impl Config {
    /// Parses a configuration file's contents.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            error: e.to_string(),
        })
    }

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Config::from_toml(&text, path)
    }

    /// Fields set in `other` replace those of `self`.
    pub fn overridden_by(mut self, other: Config) -> Config {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        take!(
            state_dir,
            network,
            listen,
            client,
            peers,
            mdns,
            max_connections,
            quic,
            direct_ranks,
            rank_lanes,
            relay_max_reservations,
            relay_circuit_secs,
            relay_circuit_mib,
            cores,
            memory_mib,
            disk_mib,
            cpu_speed,
            max_jobs,
            max_workers_per_job,
            max_cpu_time_secs,
            max_wall_time_secs,
            deny,
            users,
            user_max_cores,
            user_max_jobs,
            user_limits,
            own_users,
            native_users,
            native_read_only,
            native_pmi_library,
            topology,
            site,
            web,
            grid_view_peers,
            token,
            max_clients,
            finished_in_memory,
            store_cache_kib,
            checkpoint_max_mib,
            checkpoint_replicas,
            checkpoint_store_mib,
            credential,
            grid_key
        );
        self
    }

    /// The state directory to use.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.clone();
        }
        // systemd's StateDirectory= may list several, separated by ':'.
        if let Some(dir) = std::env::var_os("STATE_DIRECTORY")
            .and_then(|v| {
                v.to_str()
                    .and_then(|s| s.split(':').next().map(PathBuf::from))
            })
            .filter(|p| !p.as_os_str().is_empty())
        {
            return dir;
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("."));
        data.join("zorilla")
    }
}

/// What the machine has, as detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detected {
    /// Cores.
    pub cores: u32,
    /// Total memory, MiB.
    pub memory_mib: u64,
    /// Free disk where the state lives, MiB.
    pub disk_free_mib: u64,
}

/// Detects cores, memory (`/proc/meminfo`) and free disk under `dir`.
pub fn detect(dir: &Path) -> Detected {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let memory_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map(|kib| kib / 1024)
        .unwrap_or(1024);
    let disk_free_mib = rustix::fs::statvfs(dir)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize) / (1024 * 1024))
        .unwrap_or(0);
    Detected {
        cores,
        memory_mib,
        disk_free_mib,
    }
}

/// One user's limits on this node (see `user_limits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserLimitsConfig {
    /// The most cores of the user's workers here at once.
    pub max_cores: Option<u32>,
    /// The most jobs of the user with workers here at once.
    pub max_jobs: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("config.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect();
        let config = Config::from_toml(&example, Path::new("example")).unwrap();
        assert_eq!(config.network.as_deref(), Some("physics-lab"));
        assert_eq!(config.max_workers_per_job, Some(8));
        assert_eq!(config.cpu_speed, Some(1500));
        assert_eq!(config.client, Some("127.0.0.1:4100".parse().unwrap()));
        assert_eq!(config.web, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(config.max_connections, Some(128));
        assert_eq!(config.max_cpu_time_secs, Some(3600));
        assert_eq!(config.max_wall_time_secs, Some(86400));
        assert_eq!(config.finished_in_memory, Some(500));
        assert_eq!(config.store_cache_kib, Some(4096));
        assert_eq!(
            Config::from_toml("", Path::new("empty")).unwrap(),
            Config::default()
        );
    }

    /// Both sides of the check, in any build.
    #[test]
    fn quic_without_the_feature_is_refused_in_one_sentence() {
        let err = check_quic(Some(true), false).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid configuration: this zorilla-node was built without QUIC; rebuild with \
             the `quic` feature or set quic = false"
        );
        check_quic(Some(true), true).unwrap();
        for built_in in [false, true] {
            check_quic(Some(false), built_in).unwrap();
            check_quic(None, built_in).unwrap();
        }
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        let err = Config::from_toml("corez = 3", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("corez"), "{err}");
        assert!(Config::from_toml("cores = \"many\"", Path::new("x")).is_err());
    }

    #[test]
    fn overrides_replace_only_what_they_set() {
        let file = Config {
            cores: Some(4),
            network: Some("a".into()),
            ..Config::default()
        };
        let flags = Config {
            cores: Some(2),
            ..Config::default()
        };
        let merged = file.overridden_by(flags);
        assert_eq!(merged.cores, Some(2));
        assert_eq!(merged.network.as_deref(), Some("a"));
    }

    #[test]
    fn short_and_blank_tokens_are_refused() {
        assert_eq!(check_token(""), Err(TokenError::TooShort(0)));
        assert_eq!(check_token("x"), Err(TokenError::TooShort(1)));
        assert_eq!(check_token("s3cret-token"), Err(TokenError::TooShort(12)));
        assert_eq!(check_token(" "), Err(TokenError::Blank));
        assert_eq!(check_token(&" ".repeat(40)), Err(TokenError::Blank));
        assert_eq!(
            check_token("\t\n \t\n \t\n \t\n \t\n "),
            Err(TokenError::Blank)
        );
        assert_eq!(check_token("0123456789abcdef"), Ok(()));
        let message = TokenError::TooShort(1).to_string();
        assert!(message.contains("at least 16"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn detection_finds_something() {
        let d = detect(Path::new("."));
        assert!(d.cores >= 1 && d.memory_mib > 0);
    }
}
