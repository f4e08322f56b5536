//! Native jobs as the node sees them (issue 32): which executables it
//! takes, for which architecture. A native job's module is an ELF
//! executable for one architecture, with its shared libraries taken from
//! the machine that runs it; whose native jobs a node runs is its owner's
//! policy ([`zorilla_core::node::NativePolicy`]), decided on the advert,
//! and the executable is checked again by each node before it runs.

use std::path::PathBuf;

use object::{Architecture, BinaryFormat, Object, ObjectKind};
use zorilla_core::advert::Arch;
use zorilla_sandbox::Limits;
use zorilla_sandbox::native::{NativeConfig, NativeSandbox, Unenforceable};

/// The first argument with which `zorilla-node` is the helper that puts a
/// native worker into its sandbox (the node starts its own binary so).
pub const INIT_ARG: &str = "__native-init";

/// Where a native worker's program is in its job directory (it sees the
/// directory at `/job`).
pub(crate) const PROGRAM: &str = "program";

/// The most processes and threads of one native worker.
pub(crate) const MAX_PROCESSES: u32 = 256;

/// What the node runs native workers with: the kernel's sandbox, what its
/// owner lets them read, and the PMI-1 library Open MPI programs load.
#[derive(Clone)]
pub(crate) struct NativeWorkers {
    pub(crate) sandbox: NativeSandbox,
    pub(crate) read_only: Vec<PathBuf>,
    pub(crate) pmi_library: Option<PathBuf>,
}

/// The sandbox of native workers, if this machine can enforce all of it
/// (the node's own binary as its helper, the owner's caps); else the
/// sentence that says which mechanism is missing. Blocks for a few
/// milliseconds: it builds one sandbox.
pub(crate) fn probe(
    caps: Limits,
    read_only: Vec<PathBuf>,
    pmi_library: Option<PathBuf>,
) -> Result<NativeWorkers, Unenforceable> {
    let exe = std::env::current_exe()
        .map_err(|e| Unenforceable(format!("cannot find the node's own program: {e}")))?;
    let mut config = NativeConfig::new(exe);
    config.init_args = vec![INIT_ARG.into()];
    config.caps = caps;
    let sandbox = NativeSandbox::probe(config)?;
    Ok(NativeWorkers {
        sandbox,
        read_only,
        pmi_library,
    })
}

/// This machine's architecture, if native jobs can be built for it.
pub(crate) fn this_arch() -> Option<Arch> {
    if cfg!(target_arch = "x86_64") {
        Some(Arch::X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(Arch::Aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Some(Arch::Riscv64)
    } else {
        None
    }
}

/// Whether `bytes` start like an ELF file (what a native job's module is;
/// a WebAssembly module starts with `\0asm`).
pub fn looks_native(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// The architecture of the 64-bit little-endian ELF executable `bytes`
/// (a program or a position-independent one), or why it is not one a
/// node could run.
pub fn executable_arch(bytes: &[u8]) -> Result<Arch, String> {
    if !looks_native(bytes) {
        return Err("it is not an ELF executable".into());
    }
    let file = object::File::parse(bytes).map_err(|e| format!("its ELF does not parse: {e}"))?;
    if file.format() != BinaryFormat::Elf || !file.is_64() || !file.is_little_endian() {
        return Err("it is not a 64-bit little-endian ELF file".into());
    }
    match file.kind() {
        ObjectKind::Executable | ObjectKind::Dynamic if file.entry() != 0 => {}
        _ => return Err("it is an object file or a library, not an executable".into()),
    }
    match file.architecture() {
        Architecture::X86_64 => Ok(Arch::X86_64),
        Architecture::Aarch64 => Ok(Arch::Aarch64),
        Architecture::Riscv64 => Ok(Arch::Riscv64),
        other => Err(format!(
            "it is built for {other:?}, which native jobs do not run on"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_own_programs_are_native_executables_of_its_architecture() {
        let exe = std::fs::read("/bin/sh").unwrap();
        assert!(looks_native(&exe));
        assert_eq!(executable_arch(&exe), Ok(this_arch().unwrap()));
    }

    #[test]
    fn what_is_not_an_executable_is_refused_with_a_reason() {
        let wasm = b"\0asm\x01\0\0\0";
        assert!(!looks_native(wasm));
        assert!(executable_arch(wasm).unwrap_err().contains("not an ELF"));
        assert!(
            executable_arch(b"\x7fELF\x02\x01")
                .unwrap_err()
                .contains("does not parse")
        );
        // An object file and a shared library are not executables.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.c"), "int f(void) { return 1; }\n").unwrap();
        for (flags, out) in [(&["-c"][..], "f.o"), (&["-shared", "-fPIC"][..], "libf.so")] {
            let built = std::process::Command::new("cc")
                .args(flags)
                .arg(dir.path().join("f.c"))
                .arg("-o")
                .arg(dir.path().join(out))
                .status()
                .unwrap();
            assert!(built.success());
            let err = executable_arch(&std::fs::read(dir.path().join(out)).unwrap());
            assert!(err.unwrap_err().contains("not an executable"), "{out}");
        }
    }
}
