//! Job spec files: what a user writes to describe a job for
//! `zorilla submit job.toml`, and how it becomes a [`JobRequest`] with its
//! module and input files.
//!
//! ```toml
//! module = "../wasm/nqueens.wasm" # the worker program, relative to this file
//! args = ["14"]                 # arguments of every worker (after argv[0])
//! workers = 16                  # a rigid job: exactly 16 workers, all at once
//! # min_workers = 4             # or a malleable job: start with 4 ...
//! # max_workers = 16            # ... and grow up to 16
//! strategy = "spread"           # "spread" (a node each first) or "concentrate" (fill nodes)
//! cores = 1                     # per worker
//! memory_mib = 64               # per worker (also its linear-memory cap)
//! disk_mib = 0                  # per worker
//! cpu_time_secs = 300           # CPU time per worker; 0 = the node's cap
//! wall_time_secs = 600          # per worker; 0 = the node's cap
//! lifetime_secs = 120           # how long the job may wait for workers
//! on_worker_lost = "replace"    # rigid job losing a worker: "fail", "replace" or "rollback"
//! inputs = ["data/board.txt"]   # files workers read under /inputs, relative to this file
//! outputs = "results"           # where `submit --wait` and `fetch` put outputs
//! mpi = false                   # an MPI program (sdk/bin/zmpicc): must be rigid
//! native = false                # a native executable for this machine: runs only on nodes
//!                               # whose owners allow your native jobs (`native_users`)
//! deterministic = false         # the same output bits in every run and on every node
//! # seed = 7                    # of a deterministic job (default 0): keys its random bytes
//! # replicas = 3                # run 3 times on distinct nodes, keep the majority's results
//!                               # (implies deterministic; a fixed size; an array's tasks
//!                               # run twice each, a third time if they differ)
//! priority = 0                  # -128 to 127: among your jobs waiting for cores, higher first
//! # tasks = 1000                # a job array: 1000 independent tasks (ZORILLA_TASK = 0..999)
//! # max_running = 50            # ... at most 50 at once (default: all of them)
//! # retries = 2                 # ... a failed task runs again up to twice, elsewhere
//! # task_args = "params.txt"    # ... task i gets the words of line i after `args`
//! # spot_checks = 10            # ... 10% of the tasks run again on another node, results
//!                               # compared (implies deterministic)
//! ```
//!
//! Every field but `module` may be left out (defaults: one worker,
//! concentrate, 1 core, 64 MiB, a 60 s lifetime, fail on a lost worker).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zorilla_core::advert::{Strategy, WorkKind};
use zorilla_core::node::LostPolicy;

use crate::protocol::{JobRequest, NamedFile, Tasks};
use crate::validate;

/// A job spec file, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// The WebAssembly module, relative to the spec file.
    pub module: Option<PathBuf>,
    /// Arguments of every worker.
    #[serde(default)]
    pub args: Vec<String>,
    /// Exactly this many workers (a rigid job).
    pub workers: Option<u32>,
    /// Least workers to start with (a malleable job).
    pub min_workers: Option<u32>,
    /// Most workers (a malleable job).
    pub max_workers: Option<u32>,
    /// Spread or concentrate.
    pub strategy: Option<Strategy>,
    /// Cores per worker.
    pub cores: Option<u32>,
    /// Memory per worker, MiB.
    pub memory_mib: Option<u64>,
    /// Disk per worker, MiB.
    pub disk_mib: Option<u64>,
    /// CPU-time limit per worker, seconds.
    pub cpu_time_secs: Option<u64>,
    /// Wall-clock limit per worker, seconds.
    pub wall_time_secs: Option<u64>,
    /// How long the job may wait for its workers, seconds.
    pub lifetime_secs: Option<u64>,
    /// What a rigid job does when it loses a worker.
    pub on_worker_lost: Option<LostPolicy>,
    /// Input files, relative to the spec file.
    #[serde(default)]
    pub inputs: Vec<PathBuf>,
    /// Where outputs go when fetched, relative to the current directory.
    pub outputs: Option<PathBuf>,
    /// An MPI program: MPI_COMM_WORLD's size is fixed when MPI_Init runs, so
    /// the job must be rigid (checked here, on the client's side: it is a
    /// property of how the job is submitted, the node runs it like any
    /// other).
    pub mpi: Option<bool>,
    /// A native executable (ELF, for the architecture it was built for)
    /// instead of a WebAssembly module: it runs only on nodes of that
    /// architecture whose owners allow the user's native jobs.
    pub native: Option<bool>,
    /// Deterministic workers: outputs that depend only on the module,
    /// inputs, arguments, rank, job size and [`JobFile::seed`], bit for
    /// bit (virtual clocks, seeded randomness, canonical NaNs).
    pub deterministic: Option<bool>,
    /// The seed of a deterministic job (0 if left out).
    pub seed: Option<u64>,
    /// How many times the job runs on distinct nodes, its runs' results
    /// compared (1 to 3; see [`JobRequest::replicas`]). More than 1
    /// makes the job deterministic (seed 0 unless `seed` says): runs that
    /// read the clock or fresh random bytes would never agree.
    pub replicas: Option<u8>,
    /// Among the user's own jobs waiting for the same cores, higher first.
    pub priority: Option<i8>,
    /// A job array of this many tasks (left out: not an array, unless
    /// `task_args` gives them, a task per line).
    pub tasks: Option<u32>,
    /// The most tasks of the array running at once (default: all).
    pub max_running: Option<u32>,
    /// How often a failed task runs again (default 0).
    pub retries: Option<u8>,
    /// A file with a line of arguments per task, relative to the spec
    /// file: sent as an input, and task `i`'s worker gets the words of
    /// line `i` after `args`.
    pub task_args: Option<PathBuf>,
    /// The percentage of an array's tasks run again on another node, their
    /// results compared (0 to 100; see [`Tasks::spot_checks`]). More than
    /// 0 makes the job deterministic (seed 0 unless `seed` says).
    pub spot_checks: Option<u8>,
}

/// Why a job spec could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The spec is not valid TOML of the right shape.
    #[error("{path} is not a valid job spec: {error}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        error: String,
    },
    /// The values do not fit together.
    #[error("{0}")]
    Invalid(String),
}

/// A job ready to submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// What it asks for.
    pub request: JobRequest,
    /// The module's bytes.
    pub module: Vec<u8>,
    /// The input files.
    pub inputs: Vec<NamedFile>,
    /// Where outputs go, if the spec says.
    pub outputs: Option<PathBuf>,
}

impl JobFile {
    /// Reads a spec file; relative paths in it become relative to its
    /// directory.
    pub fn load(path: &Path) -> Result<JobFile, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|error| SpecError::Read {
            path: path.to_owned(),
            error,
        })?;
        let mut file: JobFile = toml::from_str(&text).map_err(|e| SpecError::Parse {
            path: path.to_owned(),
            error: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new(""));
        if let Some(module) = &mut file.module {
            *module = base.join(&*module);
        }
        for input in &mut file.inputs {
            *input = base.join(&*input);
        }
        if let Some(task_args) = &mut file.task_args {
            *task_args = base.join(&*task_args);
        }
        Ok(file)
    }

    /// Fields set in `other` replace those of `self`; lists given in
    /// `other` are added.
    pub fn overridden_by(mut self, other: JobFile) -> JobFile {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        // A worker count given on the command line replaces the file's,
        // whichever form either uses.
        if other.workers.is_some() || other.min_workers.is_some() || other.max_workers.is_some() {
            self.workers = None;
            self.min_workers = None;
            self.max_workers = None;
        }
        take!(
            module,
            workers,
            min_workers,
            max_workers,
            strategy,
            cores,
            memory_mib,
            disk_mib,
            cpu_time_secs,
            wall_time_secs,
            lifetime_secs,
            on_worker_lost,
            outputs,
            mpi,
            native,
            deterministic,
            seed,
            replicas,
            priority,
            tasks,
            max_running,
            retries,
            task_args,
            spot_checks
        );
        if !other.args.is_empty() {
            self.args = other.args;
        }
        self.inputs.extend(other.inputs);
        self
    }

    /// The request this spec describes (without reading any file).
    pub fn request(&self) -> Result<JobRequest, SpecError> {
        let defaults = JobRequest::default();
        let (min, max) = match (self.workers, self.min_workers, self.max_workers) {
            (Some(n), None, None) => (n, n),
            (Some(_), _, _) => {
                return Err(SpecError::Invalid(
                    "give either `workers` (a rigid job) or `min_workers`/`max_workers` \
                     (a malleable one), not both"
                        .into(),
                ));
            }
            (None, Some(min), Some(max)) => (min, max),
            (None, Some(min), None) => (min, min),
            (None, None, Some(max)) => (1, max),
            (None, None, None) => (1, 1),
        };
        if self.mpi == Some(true) {
            if min != max {
                return Err(SpecError::Invalid(format!(
                    "an MPI job is rigid: its MPI_COMM_WORLD has a fixed size, so give                      `workers` (--workers) instead of a range of {min} to {max} workers"
                )));
            }
            if self.on_worker_lost == Some(LostPolicy::Replace) {
                return Err(SpecError::Invalid(
                    "an MPI job cannot replace a lost worker: the replacement would start \
                     the program again while the other ranks are in the middle of it; use \
                     on_worker_lost = \"rollback\" (every rank restarts from the latest \
                     checkpoint all of them hold, see ZMPI_Checkpoint_save) or \"fail\""
                        .into(),
                ));
            }
        }
        if self.on_worker_lost == Some(LostPolicy::Rollback) && min != max {
            return Err(SpecError::Invalid(format!(
                "on_worker_lost = \"rollback\" is for a rigid job (its ranks roll back \
                 together to a checkpoint they all hold); give `workers` instead of a range \
                 of {min} to {max} (a malleable job always has lost workers replaced)"
            )));
        }
        let replicas = self.replicas.unwrap_or(1);
        let checked = self.spot_checks.unwrap_or(0) > 0;
        let deterministic = match (self.deterministic, self.seed) {
            (Some(false), _) if replicas > 1 => {
                return Err(SpecError::Invalid(format!(
                    "a job that runs {replicas} times (replicas) must be deterministic: runs \
                     that read the clock or fresh random bytes would never agree"
                )));
            }
            (Some(false), _) if checked => {
                return Err(SpecError::Invalid(
                    "a spot-checked job array must be deterministic: a task run twice that \
                     reads the clock or fresh random bytes would never agree with itself"
                        .into(),
                ));
            }
            (Some(true), seed) => Some(seed.unwrap_or(0)),
            (None, seed) if replicas > 1 || checked => Some(seed.unwrap_or(0)),
            (_, None) => None,
            (_, Some(_)) => {
                return Err(SpecError::Invalid(
                    "a seed is for a deterministic job: add `deterministic = true` \
                     (--deterministic)"
                        .into(),
                ));
            }
        };
        let tasks = self.tasks()?;
        let (min, max) = match &tasks {
            Some(tasks) => {
                if self.workers.is_some()
                    || self.min_workers.is_some()
                    || self.max_workers.is_some()
                {
                    return Err(SpecError::Invalid(
                        "a job array runs a worker per task: give `max_running` (--max-running) \
                         for how many run at once, not `workers`, `min_workers` or `max_workers`"
                            .into(),
                    ));
                }
                if self.mpi == Some(true) {
                    return Err(SpecError::Invalid(
                        "a job array's tasks are independent programs, each a world of one: \
                         it cannot be an MPI job of many ranks"
                            .into(),
                    ));
                }
                (1, self.max_running.unwrap_or(tasks.count).min(tasks.count))
            }
            None => {
                if self.max_running.is_some()
                    || self.retries.is_some()
                    || self.spot_checks.is_some()
                {
                    return Err(SpecError::Invalid(
                        "`max_running`, `retries` and `spot_checks` are for a job array: give \
                         `tasks` (--tasks) or `task_args` (--task-args)"
                            .into(),
                    ));
                }
                (min, max)
            }
        };
        let request = JobRequest {
            min_workers: min,
            max_workers: max,
            cores: self.cores.unwrap_or(defaults.cores),
            memory_mib: self.memory_mib.unwrap_or(defaults.memory_mib),
            disk_mib: self.disk_mib.unwrap_or(defaults.disk_mib),
            strategy: self.strategy.unwrap_or(defaults.strategy),
            lifetime_secs: self.lifetime_secs.unwrap_or(defaults.lifetime_secs),
            on_worker_lost: self.on_worker_lost.unwrap_or(defaults.on_worker_lost),
            args: self.args.clone(),
            cpu_time_secs: self.cpu_time_secs.unwrap_or(defaults.cpu_time_secs),
            wall_time_secs: self.wall_time_secs.unwrap_or(defaults.wall_time_secs),
            kind: WorkKind::Wasm,
            deterministic,
            priority: self.priority.unwrap_or(defaults.priority),
            tasks,
            replicas,
        };
        // The node's own check: what it would refuse is refused here,
        // before anything is sent.
        validate::request(&request).map_err(|e| SpecError::Invalid(e.to_string()))?;
        Ok(request)
    }

    /// The array this spec asks for: `tasks`, else a task per line of
    /// `task_args` (read here to count them); `None` if neither is given.
    fn tasks(&self) -> Result<Option<Tasks>, SpecError> {
        let args_file = match &self.task_args {
            None => None,
            Some(path) => {
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| {
                        SpecError::Invalid(format!(
                            "task_args {} has no usable file name",
                            path.display()
                        ))
                    })?
                    .to_string();
                Some((path, name))
            }
        };
        let count = match (self.tasks, &args_file) {
            (Some(count), _) => count,
            (None, Some((path, _))) => {
                let text = std::fs::read_to_string(path).map_err(|error| SpecError::Read {
                    path: path.to_path_buf(),
                    error,
                })?;
                u32::try_from(text.lines().count()).unwrap_or(u32::MAX)
            }
            (None, None) => return Ok(None),
        };
        Ok(Some(Tasks {
            count,
            retries: self.retries.unwrap_or(0),
            args_file: args_file.map(|(_, name)| name),
            spot_checks: self.spot_checks.unwrap_or(0),
        }))
    }

    /// `request` with the kind of worker `module` (read from `path`) is:
    /// a native executable only if the spec says so, and then of the
    /// architecture it was built for.
    fn with_kind(
        &self,
        request: JobRequest,
        path: &Path,
        module: &[u8],
    ) -> Result<JobRequest, SpecError> {
        let kind = if self.native == Some(true) {
            let arch = crate::native::executable_arch(module).map_err(|e| {
                SpecError::Invalid(format!("{} cannot be a native job: {e}", path.display()))
            })?;
            WorkKind::Native(arch)
        } else if crate::native::looks_native(module) {
            return Err(SpecError::Invalid(format!(
                "{} is a native executable: give `native = true` in the spec or --native \
                 (it runs only on nodes whose owners allow your native jobs), or build a \
                 WebAssembly module",
                path.display()
            )));
        } else {
            WorkKind::Wasm
        };
        let request = JobRequest { kind, ..request };
        // Checked again with its kind: a native job cannot be deterministic.
        validate::request(&request).map_err(|e| SpecError::Invalid(e.to_string()))?;
        Ok(request)
    }

    /// The request with the module and inputs read from disk.
    pub fn job(&self) -> Result<Job, SpecError> {
        let request = self.request()?;
        let module_path = self.module.as_ref().ok_or_else(|| {
            SpecError::Invalid(
                "no module: give `module = \"program.wasm\"` in the spec or --module".into(),
            )
        })?;
        let read = |path: &Path| {
            std::fs::read(path).map_err(|error| SpecError::Read {
                path: path.to_owned(),
                error,
            })
        };
        let module = read(module_path)?;
        let request = self.with_kind(request, module_path, &module)?;
        let mut inputs = Vec::with_capacity(self.inputs.len());
        // A job array's task arguments travel as one more input.
        for path in self.inputs.iter().chain(&self.task_args) {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| {
                    SpecError::Invalid(format!("input {} has no usable file name", path.display()))
                })?
                .to_string();
            // Checked before the file is read (all of them, below, too).
            validate::file_name("input file", &name)
                .map_err(|e| SpecError::Invalid(e.to_string()))?;
            if inputs.iter().any(|f: &NamedFile| f.name == name) {
                return Err(SpecError::Invalid(
                    validate::Invalid::DuplicateInput(name).to_string(),
                ));
            }
            inputs.push(NamedFile {
                name,
                data: read(path)?,
            });
        }
        // What the node would refuse is refused before it is sent.
        let (request, module, inputs) = validate::submission(request, module, inputs)
            .map_err(|e| SpecError::Invalid(e.to_string()))?
            .into_parts();
        Ok(Job {
            request,
            module,
            inputs,
            outputs: self.outputs.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example in the module documentation.
    fn documented() -> String {
        include_str!("jobspec.rs")
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect()
    }

    #[test]
    fn the_documented_example_is_a_rigid_spread_job() {
        let file: JobFile = toml::from_str(&documented()).unwrap();
        let request = file.request().unwrap();
        assert_eq!((request.min_workers, request.max_workers), (16, 16));
        assert_eq!(request.strategy, Strategy::Spread);
        assert_eq!(request.on_worker_lost, LostPolicy::Replace);
        assert_eq!(request.args, vec!["14".to_string()]);
    }

    #[test]
    fn replicas_make_a_job_deterministic_and_are_checked() {
        let request = |toml: &str| toml::from_str::<JobFile>(toml).unwrap().request();
        let replicated = request("replicas = 3").unwrap();
        assert_eq!(
            (replicated.replicas, replicated.deterministic),
            (3, Some(0))
        );
        let seeded = request("replicas = 2\nseed = 7").unwrap();
        assert_eq!(seeded.deterministic, Some(7));
        assert_eq!(request("").unwrap().replicas, 1);
        let clocked = request("replicas = 2\ndeterministic = false")
            .unwrap_err()
            .to_string();
        assert!(clocked.contains("must be deterministic"), "{clocked}");
        let many = request("replicas = 4").unwrap_err().to_string();
        assert!(
            many.contains("replicas is 4, but must be from 1 to 3"),
            "{many}"
        );
    }

    #[test]
    fn a_deterministic_job_has_seed_0_unless_given_and_a_seed_alone_is_refused() {
        let request = |toml: &str| toml::from_str::<JobFile>(toml).unwrap().request();
        assert_eq!(request("").unwrap().deterministic, None);
        let det = request("deterministic = true").unwrap();
        assert_eq!(det.deterministic, Some(0));
        let seeded = request("deterministic = true\nseed = 7").unwrap();
        assert_eq!(seeded.deterministic, Some(7));
        let alone = request("seed = 7").unwrap_err().to_string();
        assert!(alone.contains("add `deterministic = true`"), "{alone}");
        let malleable = request("deterministic = true\nmin_workers = 1\nmax_workers = 2");
        let malleable = malleable.unwrap_err().to_string();
        assert!(malleable.contains("must have a fixed size"), "{malleable}");
    }

    #[test]
    fn paths_are_relative_to_the_spec_and_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("m.wasm"), b"\0asm").unwrap();
        std::fs::write(dir.path().join("data/in.txt"), b"hi").unwrap();
        let spec = dir.path().join("job.toml");
        std::fs::write(
            &spec,
            "module = \"m.wasm\"\ninputs = [\"data/in.txt\"]\nmin_workers = 2\nmax_workers = 4\n",
        )
        .unwrap();
        let job = JobFile::load(&spec).unwrap().job().unwrap();
        assert_eq!(job.module, b"\0asm");
        assert_eq!(job.inputs[0].name, "in.txt");
        assert_eq!(job.inputs[0].data, b"hi");
        assert_eq!((job.request.min_workers, job.request.max_workers), (2, 4));
    }

    #[test]
    fn flags_override_the_file() {
        let file = JobFile {
            workers: Some(4),
            cores: Some(2),
            args: vec!["a".into()],
            ..JobFile::default()
        };
        let flags = JobFile {
            min_workers: Some(1),
            max_workers: Some(8),
            args: vec!["b".into()],
            ..JobFile::default()
        };
        let request = file.overridden_by(flags).request().unwrap();
        assert_eq!((request.min_workers, request.max_workers), (1, 8));
        assert_eq!(request.cores, 2);
        assert_eq!(request.args, vec!["b".to_string()]);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = toml::from_str::<JobFile>("workerz = 3").unwrap_err();
        assert!(err.to_string().contains("workerz"), "{err}");
        let both = JobFile {
            workers: Some(2),
            max_workers: Some(3),
            ..JobFile::default()
        };
        assert!(both.request().unwrap_err().to_string().contains("not both"));
        let inverted = JobFile {
            min_workers: Some(3),
            max_workers: Some(2),
            ..JobFile::default()
        };
        assert!(inverted.request().is_err());
        let no_module = JobFile::default().job().unwrap_err().to_string();
        assert!(no_module.contains("no module"), "{no_module}");
        let missing = JobFile {
            module: Some("/nonexistent/x.wasm".into()),
            ..JobFile::default()
        };
        assert!(
            missing
                .job()
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
    }

    #[test]
    fn an_mpi_job_must_be_rigid() {
        let malleable = JobFile {
            mpi: Some(true),
            min_workers: Some(2),
            max_workers: Some(4),
            ..JobFile::default()
        };
        let err = malleable.request().unwrap_err().to_string();
        assert!(err.contains("an MPI job is rigid"), "{err}");
        assert!(err.contains("2 to 4"), "{err}");
        let replace = JobFile {
            mpi: Some(true),
            workers: Some(3),
            on_worker_lost: Some(LostPolicy::Replace),
            ..JobFile::default()
        };
        let err = replace.request().unwrap_err().to_string();
        assert!(err.contains("cannot replace a lost worker"), "{err}");
        // Rigid: fine, with the same request as without `mpi`.
        let rigid = JobFile {
            mpi: Some(true),
            workers: Some(3),
            ..JobFile::default()
        };
        let request = rigid.request().unwrap();
        assert_eq!((request.min_workers, request.max_workers), (3, 3));
        // From a spec file, and the flag given on the command line.
        let file: JobFile = toml::from_str("mpi = true\nmin_workers = 1\nmax_workers = 8").unwrap();
        assert!(file.request().is_err());
        let flags = JobFile {
            mpi: Some(true),
            ..JobFile::default()
        };
        let plain: JobFile = toml::from_str("min_workers = 1\nmax_workers = 8").unwrap();
        assert!(plain.clone().request().is_ok());
        assert!(plain.overridden_by(flags).request().is_err());
    }

    #[test]
    fn a_rigid_job_may_roll_back_and_a_malleable_one_may_not() {
        let file: JobFile =
            toml::from_str("mpi = true\nworkers = 4\non_worker_lost = \"rollback\"").unwrap();
        let request = file.request().unwrap();
        assert_eq!(request.on_worker_lost, LostPolicy::Rollback);
        let malleable: JobFile =
            toml::from_str("min_workers = 2\nmax_workers = 4\non_worker_lost = \"rollback\"")
                .unwrap();
        let err = malleable.request().unwrap_err().to_string();
        assert!(err.contains("for a rigid job"), "{err}");
        assert!(err.contains("2 to 4"), "{err}");
    }
}
