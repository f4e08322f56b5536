//! What the node tells the helper ([`super::init`]) to set up: one worker's
//! identity, groups, paths, limits and program, as the helper's command
//! line. Both sides are in this crate, so the format is private to it;
//! it is strict all the same (an unknown flag is an error). The job's
//! environment is not in it: it is the helper's own environment, which
//! the job's program inherits, so that it is as private on the machine as
//! any process's (a command line is not).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// One worker's setup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The worker's user and group outside its user namespace.
    pub(crate) outside_id: u32,
    /// Its user and group inside.
    pub(crate) inside_id: u32,
    /// `cgroup.procs` files the helper joins first.
    pub(crate) cgroups: Vec<PathBuf>,
    /// The job directory (host path), mounted read-write at `/job`.
    pub(crate) job_dir: PathBuf,
    /// Host paths shown read-only at the same paths.
    pub(crate) read_only: Vec<PathBuf>,
    /// Bytes of `/tmp` and of `/dev/shm` (each a tmpfs; their pages count
    /// against the memory limit too).
    pub(crate) tmp_bytes: u64,
    /// Only set everything up and exit, running nothing (the probe).
    pub(crate) probe: bool,
    /// The program, as the worker sees it.
    pub(crate) exe: PathBuf,
    /// Its arguments after `argv[0]`.
    pub(crate) args: Vec<OsString>,
}

impl Plan {
    /// The helper's arguments.
    pub(crate) fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: OsString| {
            out.push(name.into());
            out.push(value);
        };
        flag("--outside-id", self.outside_id.to_string().into());
        flag("--inside-id", self.inside_id.to_string().into());
        for c in &self.cgroups {
            flag("--cgroup", c.clone().into());
        }
        flag("--job-dir", self.job_dir.clone().into());
        for p in &self.read_only {
            flag("--read-only", p.clone().into());
        }
        flag("--tmp-bytes", self.tmp_bytes.to_string().into());
        if self.probe {
            flag("--probe", "yes".into());
        }
        out.push("--".into());
        out.push(self.exe.clone().into());
        out.extend(self.args.iter().cloned());
        out
    }

    /// Reads the helper's arguments (without `argv[0]`).
    pub(crate) fn from_args(args: impl IntoIterator<Item = OsString>) -> Result<Plan, String> {
        let mut plan = Plan::default();
        let mut args = args.into_iter();
        let number = |v: &OsStr| -> Result<u64, String> {
            v.to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("not a number: {}", v.to_string_lossy()))
        };
        loop {
            let Some(name) = args.next() else {
                return Err("no program after --".into());
            };
            if name == "--" {
                break;
            }
            let value = args
                .next()
                .ok_or_else(|| format!("no value after {}", name.to_string_lossy()))?;
            match name.to_str() {
                Some("--outside-id") => plan.outside_id = id(number(&value)?)?,
                Some("--inside-id") => plan.inside_id = id(number(&value)?)?,
                Some("--cgroup") => plan.cgroups.push(value.into()),
                Some("--job-dir") => plan.job_dir = value.into(),
                Some("--read-only") => plan.read_only.push(value.into()),
                Some("--tmp-bytes") => plan.tmp_bytes = number(&value)?,
                Some("--probe") => plan.probe = true,
                _ => return Err(format!("unknown flag {}", name.to_string_lossy())),
            }
        }
        plan.exe = args.next().ok_or("no program after --")?.into();
        plan.args = args.collect();
        Ok(plan)
    }
}

fn id(n: u64) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("not a user id: {n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_survives_the_command_line() {
        let plan = Plan {
            outside_id: 1_000_007,
            inside_id: 1000,
            cgroups: vec!["/sys/fs/cgroup/pids/z/w1/cgroup.procs".into()],
            job_dir: "/var/lib/zorilla/jobs/a b".into(),
            read_only: vec!["/usr".into(), "/lib64".into()],
            tmp_bytes: 1 << 20,
            probe: false,
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), "--".into(), "echo hi".into()],
        };
        assert_eq!(Plan::from_args(plan.to_args()), Ok(plan));
        assert!(
            Plan::from_args(["--nonsense".into(), "1".into(), "--".into(), "x".into()]).is_err()
        );
        assert!(Plan::from_args(["--inside-id".into(), "1".into()]).is_err());
    }
}
