//! Files under a directory that someone else fills, touched without ever
//! following a symbolic link: how a node lists, measures and reads what a
//! job left in its `/outputs`, how it reads its own file cache, and how
//! `zorilla fetch` writes fetched outputs into a directory of the user's.
//!
//! A guest can leave anything in `/outputs`: relative symbolic links to the
//! node's own files (`../../../../identity.ed25519`, which the guest cannot
//! follow but the node could), links to `/proc/self/environ` or
//! `/dev/zero`, directories nested without end, files far larger than its
//! disk limit (a sparse file costs nothing to make), and it may swap an
//! entry for a link between the node's look and its open. So:
//!
//! - every path below a root is opened one component at a time, each
//!   relative to its parent's descriptor, with `O_NOFOLLOW`; nothing here
//!   resolves a path string below the root in one go;
//! - a file is looked at (`fstatat` without following), opened with
//!   `O_NOFOLLOW | O_NONBLOCK` (a FIFO swapped in cannot hang the open), and
//!   its descriptor must then be the same regular file that was looked at;
//! - walks are bounded: [`MAX_DEPTH`] directory levels, [`MAX_ENTRIES`]
//!   entries in all;
//! - names are checked before they become paths ([`check_relative`],
//!   [`check_file_name`], [`is_sha256_hex`]).
//!
//! Anything that is not a regular file or a directory is reported as a
//! [`Skip`] with a sentence saying why, for the job's log.

use std::fmt;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Directory levels below the root that a walk enters (`/outputs/a/b` is
/// two); deeper directories are skipped with [`Skip::TooDeep`].
pub const MAX_DEPTH: usize = 8;

/// Entries (of any kind, at any level) a walk looks at; it stops after
/// this many and says so ([`Listing::truncated`]).
pub const MAX_ENTRIES: usize = 10_000;

/// Longest relative name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// Most components of a relative name: a rank, [`MAX_DEPTH`] directories
/// and a file.
pub const MAX_COMPONENTS: usize = MAX_DEPTH + 2;

/// What a directory entry is, as seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Something else.
    Unknown,
}

impl Kind {
    fn of(stat: &rustix::fs::Stat) -> Kind {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Directory,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            _ => Kind::Unknown,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::File => "a regular file",
            Kind::Directory => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a named pipe",
            Kind::Socket => "a socket",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Unknown => "of an unknown kind",
        })
    }
}

/// Why an entry was not listed or not opened as a regular file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// Not a regular file (nor a directory, where directories are walked).
    #[error("{0}, not a regular file")]
    NotRegular(Kind),
    /// A directory more than [`MAX_DEPTH`] levels down.
    #[error("a directory more than {MAX_DEPTH} levels deep")]
    TooDeep,
    /// A name that is not UTF-8 or not acceptable as a relative name.
    #[error("{0}")]
    BadName(NameError),
    /// Larger than what may be read.
    #[error("{size} bytes, more than the {limit} bytes left of the limit")]
    TooLarge {
        /// Its size.
        size: u64,
        /// What was left.
        limit: u64,
    },
    /// It was replaced between the look and the open.
    #[error("it changed while it was being opened")]
    Changed,
    /// It could not be looked at or opened.
    #[error("cannot open it: {0}")]
    Io(String),
}

/// Why a relative name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The empty name.
    #[error("the name is empty")]
    Empty,
    /// Longer than [`MAX_NAME_BYTES`].
    #[error("the name is longer than {MAX_NAME_BYTES} bytes")]
    TooLong,
    /// Contains a NUL byte.
    #[error("the name contains a NUL byte")]
    Nul,
    /// Starts with `/`.
    #[error("the name is an absolute path")]
    Absolute,
    /// Has an empty, `.` or `..` component.
    #[error("the name has an empty, '.' or '..' part")]
    BadComponent,
    /// Has more than [`MAX_COMPONENTS`] components.
    #[error("the name has more than {MAX_COMPONENTS} parts")]
    TooDeep,
    /// Has a `/` where one file name is expected.
    #[error("the name contains '/'")]
    Slash,
    /// Not UTF-8 (names on disk only).
    #[error("the name is not UTF-8")]
    NotUtf8,
}

/// Checks a `/`-separated relative name: non-empty, at most
/// [`MAX_NAME_BYTES`] and [`MAX_COMPONENTS`] parts, no NUL, not absolute,
/// no empty, `.` or `..` part. Such a name joined to a directory names
/// something inside it (as long as no part is a link, which the openers
/// here refuse).
pub fn check_relative(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    if name.contains('\0') {
        return Err(NameError::Nul);
    }
    if name.starts_with('/') {
        return Err(NameError::Absolute);
    }
    let mut parts = 0;
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(NameError::BadComponent);
        }
        parts += 1;
    }
    if parts > MAX_COMPONENTS {
        return Err(NameError::TooDeep);
    }
    Ok(())
}

/// Checks one file name (a [`check_relative`] name without `/`).
pub fn check_file_name(name: &str) -> Result<(), NameError> {
    if name.contains('/') {
        return Err(NameError::Slash);
    }
    check_relative(name)
}

/// Whether `s` is a SHA-256 as this project writes it: exactly 64
/// lowercase hex digits. Files named by hash are found by this name alone,
/// so nothing else may become such a path.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What a walk found below a root.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Regular files: `/`-separated names relative to the root and their
    /// sizes, in name order within each directory.
    pub files: Vec<(String, u64)>,
    /// Entries that are not regular files or walked directories, and why.
    pub skipped: Vec<(String, Skip)>,
    /// The walk stopped after [`MAX_ENTRIES`] entries.
    pub truncated: bool,
}

fn io_err(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

fn skip_io(e: Errno) -> Skip {
    Skip::Io(io_err(e).to_string())
}

/// Opens a directory the caller names by a path it trusts, without
/// following a link in its last component.
fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    rustix::fs::openat(
        CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err)
}

/// Opens subdirectory `name` of `dir`, refusing a link.
fn open_subdir(dir: impl AsFd, name: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Looks at `name` in `dir` without following it.
fn look(dir: impl AsFd, name: &str) -> Result<rustix::fs::Stat, Errno> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
}

/// Walks the tree below `root` (a directory the caller trusts by path;
/// everything below it is untrusted): regular files with their sizes, and
/// what was skipped. Directories are entered up to [`MAX_DEPTH`] levels,
/// never through a link; at most [`MAX_ENTRIES`] entries are looked at.
pub fn walk(root: &Path) -> std::io::Result<Listing> {
    let dir = open_root(root)?;
    let mut listing = Listing::default();
    let mut budget = MAX_ENTRIES;
    walk_dir(dir, "", 0, &mut listing, &mut budget);
    Ok(listing)
}

fn walk_dir(dir: OwnedFd, prefix: &str, depth: usize, out: &mut Listing, budget: &mut usize) {
    let mut names = Vec::new();
    let entries = match rustix::fs::Dir::read_from(&dir) {
        Ok(entries) => entries,
        Err(e) => {
            out.skipped
                .push((prefix.trim_end_matches('/').into(), skip_io(e)));
            return;
        }
    };
    for entry in entries {
        let Ok(entry) = entry else { break };
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        if *budget == 0 {
            out.truncated = true;
            break;
        }
        *budget -= 1;
        names.push(raw.to_vec());
    }
    names.sort();
    for raw in names {
        let Ok(name) = String::from_utf8(raw.clone()) else {
            let shown = format!("{prefix}{}", String::from_utf8_lossy(&raw));
            out.skipped.push((shown, Skip::BadName(NameError::NotUtf8)));
            continue;
        };
        let full = format!("{prefix}{name}");
        let stat = match look(&dir, &name) {
            Ok(stat) => stat,
            Err(e) => {
                out.skipped.push((full, skip_io(e)));
                continue;
            }
        };
        match Kind::of(&stat) {
            Kind::File => out.files.push((full, stat.st_size.max(0) as u64)),
            Kind::Directory if depth >= MAX_DEPTH => out.skipped.push((full, Skip::TooDeep)),
            Kind::Directory => match open_subdir(&dir, &name) {
                Ok(sub) => walk_dir(sub, &format!("{full}/"), depth + 1, out, budget),
                Err(Errno::LOOP | Errno::NOTDIR) => out.skipped.push((full, Skip::Changed)),
                Err(e) => out.skipped.push((full, skip_io(e))),
            },
            other => out.skipped.push((full, Skip::NotRegular(other))),
        }
    }
}

/// Bytes of the regular files below `root` (their apparent sizes, so a
/// sparse file counts in full), found as [`walk`] finds them: links are
/// not followed. A tree with more than [`MAX_ENTRIES`] entries counts as
/// `u64::MAX` (over any limit); a missing root as 0.
pub fn tree_bytes(root: &Path) -> u64 {
    match walk(root) {
        Ok(listing) if listing.truncated => u64::MAX,
        Ok(listing) => listing
            .files
            .iter()
            .fold(0u64, |sum, (_, size)| sum.saturating_add(*size)),
        Err(_) => 0,
    }
}

/// Opens the directory holding the last component of `relative` below
/// `root`, one component at a time without following links; returns it and
/// the last component.
fn open_parent<'a>(root: &Path, relative: &'a str) -> Result<(OwnedFd, &'a str), Skip> {
    check_relative(relative).map_err(Skip::BadName)?;
    let mut dir = open_root(root).map_err(|e| Skip::Io(e.to_string()))?;
    let mut parts = relative.split('/');
    let last = parts.next_back().unwrap_or(relative);
    for part in parts {
        dir = match open_subdir(&dir, part) {
            Ok(sub) => sub,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let kind = look(&dir, part).map_or(Kind::Unknown, |s| Kind::of(&s));
                return Err(Skip::NotRegular(kind));
            }
            Err(e) => return Err(skip_io(e)),
        };
    }
    Ok((dir, last))
}

/// Opens regular file `relative` below `root` for reading, without
/// following a link at any level, and returns it with its size; a file of
/// more than `max_bytes` is not opened. Read at most the returned size from
/// it (the size is the one checked).
pub fn open_file(root: &Path, relative: &str, max_bytes: u64) -> Result<(File, u64), Skip> {
    let (dir, name) = open_parent(root, relative)?;
    let before = look(&dir, name).map_err(skip_io)?;
    match Kind::of(&before) {
        Kind::File => {}
        other => return Err(Skip::NotRegular(other)),
    }
    let size = before.st_size.max(0) as u64;
    if size > max_bytes {
        return Err(Skip::TooLarge {
            size,
            limit: max_bytes,
        });
    }
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP => Skip::Changed,
        e => skip_io(e),
    })?;
    let after = rustix::fs::fstat(&fd).map_err(skip_io)?;
    if Kind::of(&after) != Kind::File
        || after.st_dev != before.st_dev
        || after.st_ino != before.st_ino
    {
        return Err(Skip::Changed);
    }
    let size = after.st_size.max(0) as u64;
    if size > max_bytes {
        return Err(Skip::TooLarge {
            size,
            limit: max_bytes,
        });
    }
    Ok((File::from(fd), size))
}

/// Reads regular file `relative` below `root` whole, as [`open_file`]
/// opens it: at most `max_bytes`.
pub fn read_file(root: &Path, relative: &str, max_bytes: u64) -> Result<Vec<u8>, Skip> {
    use std::io::Read;
    let (file, size) = open_file(root, relative, max_bytes)?;
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(size)
        .read_to_end(&mut data)
        .map_err(|e| Skip::Io(e.to_string()))?;
    Ok(data)
}

/// Creates (or truncates) regular file `relative` below `root` for
/// writing, creating the directories on the way, without following a link
/// at any level: an existing link, or anything else than a regular file or
/// a directory where one is needed, is an error and nothing is written
/// through it. `root` itself is the caller's (created if missing).
pub fn create_file(root: &Path, relative: &str) -> std::io::Result<File> {
    let refused = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    check_relative(relative).map_err(|e| refused(format!("{relative:?}: {e}")))?;
    std::fs::create_dir_all(root)?;
    let mut dir = open_root(root)?;
    let mut parts = relative.split('/');
    let last = parts.next_back().unwrap_or(relative);
    for part in parts {
        match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io_err(e)),
        }
        dir = open_subdir(&dir, part).map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => {
                refused(format!("{relative:?}: {part:?} is not a directory"))
            }
            e => io_err(e),
        })?;
    }
    match look(&dir, last) {
        Ok(stat) if Kind::of(&stat) != Kind::File => {
            return Err(refused(format!(
                "{relative:?} exists and is {}",
                Kind::of(&stat)
            )));
        }
        Ok(_) | Err(Errno::NOENT) => {}
        Err(e) => return Err(io_err(e)),
    }
    let fd = rustix::fs::openat(
        &dir,
        last,
        OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| match e {
        Errno::LOOP => refused(format!("{relative:?} is a symbolic link")),
        e => io_err(e),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(io_err)?;
    if Kind::of(&stat) != Kind::File {
        return Err(refused(format!("{relative:?} is {}", Kind::of(&stat))));
    }
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn relative_names_stay_inside() {
        for good in [
            "a",
            "0/ok.txt",
            "0/sub/deep.txt",
            "a..b",
            ".hidden",
            "x/..y",
        ] {
            assert_eq!(check_relative(good), Ok(()), "{good}");
        }
        let cases = [
            ("", NameError::Empty),
            ("/etc/passwd", NameError::Absolute),
            ("..", NameError::BadComponent),
            ("0/../../x", NameError::BadComponent),
            ("0/./x", NameError::BadComponent),
            ("0//x", NameError::BadComponent),
            ("0/x/", NameError::BadComponent),
            ("a\0b", NameError::Nul),
        ];
        for (bad, why) in cases {
            assert_eq!(check_relative(bad), Err(why), "{bad:?}");
        }
        assert_eq!(check_relative(&"a".repeat(2000)), Err(NameError::TooLong));
        let deep = ["d"; MAX_COMPONENTS + 1].join("/");
        assert_eq!(check_relative(&deep), Err(NameError::TooDeep));
        assert_eq!(check_file_name("in.txt"), Ok(()));
        assert_eq!(check_file_name("a/b"), Err(NameError::Slash));
        assert_eq!(check_file_name("../x"), Err(NameError::Slash));
        assert_eq!(check_file_name(".."), Err(NameError::BadComponent));
    }

    #[test]
    fn only_lowercase_hex_of_64_digits_is_a_hash() {
        let hash = "0123456789abcdef".repeat(4);
        assert!(is_sha256_hex(&hash));
        for bad in [
            "",
            "../identity.ed25519",
            "/etc/passwd",
            &hash[..63],
            format!("{hash}0").as_str(),
            hash.to_uppercase().as_str(),
            format!("../{}", &hash[3..]).as_str(),
            format!("{}/x", &hash[..62]).as_str(),
        ] {
            assert!(!is_sha256_hex(bad), "{bad:?}");
        }
    }

    /// A tree like a hostile guest leaves: links out (relative, absolute,
    /// to a device, to a directory), a FIFO, a socket, nested directories,
    /// and two ordinary files.
    fn hostile_tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), b"SECRET").unwrap();
        let root = dir.path().join("jobs/0/outputs");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("ok.txt"), b"fine\n").unwrap();
        std::fs::write(root.join("sub/deeper/deep.txt"), b"deep\n").unwrap();
        symlink("../../../secret", root.join("key")).unwrap();
        symlink("../../../../secret", root.join("sub/key")).unwrap();
        symlink("/etc/passwd", root.join("passwd")).unwrap();
        symlink("/dev/zero", root.join("zero")).unwrap();
        symlink("../../..", root.join("state")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        rustix::fs::mkfifoat(CWD, root.join("fifo"), Mode::from_raw_mode(0o644)).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(root.join("socket")).unwrap();
        (dir, root)
    }

    #[test]
    fn a_walk_lists_regular_files_only_and_says_why_for_the_rest() {
        let (_dir, root) = hostile_tree();
        let listing = walk(&root).unwrap();
        assert_eq!(
            listing.files,
            vec![("ok.txt".to_string(), 5), ("sub/deeper/deep.txt".into(), 5)]
        );
        let link = Skip::NotRegular(Kind::Symlink);
        assert_eq!(
            listing.skipped,
            vec![
                ("fifo".to_string(), Skip::NotRegular(Kind::Fifo)),
                ("key".into(), link.clone()),
                ("loop".into(), link.clone()),
                ("passwd".into(), link.clone()),
                ("socket".into(), Skip::NotRegular(Kind::Socket)),
                ("state".into(), link.clone()),
                ("sub/key".into(), link.clone()),
                ("zero".into(), link),
            ]
        );
        assert!(!listing.truncated);
        assert_eq!(
            Skip::NotRegular(Kind::Symlink).to_string(),
            "a symbolic link, not a regular file"
        );
        assert_eq!(tree_bytes(&root), 10);
        // A link as the root itself is not followed either.
        symlink(&root, root.parent().unwrap().join("linked")).unwrap();
        assert!(walk(&root.parent().unwrap().join("linked")).is_err());
    }

    #[test]
    fn opening_refuses_links_fifos_directories_and_large_files() {
        let (_dir, root) = hostile_tree();
        let (file, size) = open_file(&root, "ok.txt", 100).unwrap();
        assert_eq!(size, 5);
        drop(file);
        assert_eq!(
            read_file(&root, "sub/deeper/deep.txt", 5).unwrap(),
            b"deep\n"
        );
        let link = Err(Skip::NotRegular(Kind::Symlink));
        for name in ["key", "passwd", "zero", "loop", "sub/key"] {
            assert_eq!(read_file(&root, name, u64::MAX), link, "{name}");
        }
        // Through a linked directory: the link is refused, not followed.
        assert_eq!(read_file(&root, "state/secret", u64::MAX), link);
        // A FIFO with no writer: refused at once, not waited on.
        assert_eq!(
            read_file(&root, "fifo", u64::MAX),
            Err(Skip::NotRegular(Kind::Fifo))
        );
        assert_eq!(
            read_file(&root, "sub", u64::MAX),
            Err(Skip::NotRegular(Kind::Directory))
        );
        assert_eq!(
            read_file(&root, "ok.txt", 4),
            Err(Skip::TooLarge { size: 5, limit: 4 })
        );
        assert!(matches!(
            read_file(&root, "../../../secret", u64::MAX),
            Err(Skip::BadName(NameError::BadComponent))
        ));
        assert!(matches!(
            read_file(&root, "/etc/passwd", u64::MAX),
            Err(Skip::BadName(NameError::Absolute))
        ));
    }

    #[test]
    fn a_sparse_file_counts_in_full_and_walks_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        assert_eq!(tree_bytes(dir.path()), 1 << 40);
        assert_eq!(
            open_file(dir.path(), "sparse", 1 << 30).unwrap_err(),
            Skip::TooLarge {
                size: 1 << 40,
                limit: 1 << 30
            }
        );
        // Deeper than MAX_DEPTH: the directory is skipped, not entered.
        let mut deep = dir.path().to_path_buf();
        for _ in 0..=MAX_DEPTH {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("f"), b"x").unwrap();
        let listing = walk(dir.path()).unwrap();
        let too_deep = ["d"; MAX_DEPTH + 1].join("/");
        assert_eq!(listing.skipped, vec![(too_deep, Skip::TooDeep)]);
        // More than MAX_ENTRIES entries: the walk stops and says so.
        let many = dir.path().join("many");
        std::fs::create_dir(&many).unwrap();
        for i in 0..=MAX_ENTRIES {
            File::create(many.join(i.to_string())).unwrap();
        }
        let listing = walk(&many).unwrap();
        assert!(listing.truncated);
        assert_eq!(listing.files.len(), MAX_ENTRIES);
        assert_eq!(tree_bytes(&many), u64::MAX);
    }

    #[test]
    fn creating_never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"untouched").unwrap();
        let dest = dir.path().join("results");
        std::fs::create_dir(&dest).unwrap();
        symlink(outside.join("victim"), dest.join("file")).unwrap();
        symlink(&outside, dest.join("dir")).unwrap();
        use std::io::Write;
        assert!(create_file(&dest, "file").is_err());
        assert!(create_file(&dest, "dir/victim").is_err());
        assert!(create_file(&dest, "../outside/victim").is_err());
        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"untouched");
        // Ordinary files and directories are made, and made again.
        for _ in 0..2 {
            let mut f = create_file(&dest, "0/sub/out.txt").unwrap();
            f.write_all(b"result").unwrap();
        }
        assert_eq!(
            std::fs::read(dest.join("0/sub/out.txt")).unwrap(),
            b"result"
        );
        assert!(
            create_file(&dest, "0/sub").is_err(),
            "a directory is not a file"
        );
    }
}
