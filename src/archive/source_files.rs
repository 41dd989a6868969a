//! Reading the files of a store we import (docs/security.md, "Files we
//! import"): regular files only, each read bounded by the size it had when
//! opened (or the size its row promises).
//!
//! A store's directory is someone else's: a blob may be a FIFO (opening it
//! would wait for a writer forever), a link to `/dev/zero` (hashing it would
//! never end) or a link out of the store. So every file is opened with
//! `O_NONBLOCK` (a FIFO opens at once) and, inside the store, `O_NOFOLLOW`
//! (a link is refused, not followed), and its type is read with `fstat` on
//! the descriptor actually read, so nothing can be swapped in between the
//! check and the read. Autobuild writes neither links nor special files.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};

/// A file opened for reading.
pub enum Opened {
    /// A regular file and its size when opened.
    Regular(std::fs::File, u64),
    Absent,
    /// Not a regular file: what it is instead (`a FIFO`, `a symbolic link`…).
    Special(&'static str),
}

/// Whether a symbolic link at the path itself is followed: yes for a path
/// the operator named, no for a file inside the store.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Links {
    Follow,
    Refuse,
}

/// Opens `path` without blocking and says what it is.
pub fn open(path: &Path, links: Links) -> std::io::Result<Opened> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Opened::Absent),
        // O_NOFOLLOW's refusal of a link.
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) && links == Links::Refuse => {
            return Ok(Opened::Special("a symbolic link"));
        }
        Err(err) => return Err(err),
    };
    let meta = file.metadata()?;
    let kind = meta.file_type();
    Ok(if kind.is_file() {
        Opened::Regular(file, meta.len())
    } else if kind.is_fifo() {
        Opened::Special("a FIFO")
    } else if kind.is_char_device() {
        Opened::Special("a character device")
    } else if kind.is_block_device() {
        Opened::Special("a block device")
    } else if kind.is_socket() {
        Opened::Special("a socket")
    } else if kind.is_dir() {
        Opened::Special("a directory")
    } else {
        Opened::Special("not a regular file")
    })
}

/// What hashing a blob file found.
pub enum Hashed {
    /// Its SHA-256 (hex) and size.
    Ok(String, u64),
    Absent,
    Special(&'static str),
    /// Larger than `max` bytes: not read.
    TooLarge(u64),
}

/// The SHA-256 of the regular file at `path` (links refused), reading at
/// most the size it had when opened, and nothing when that is over `max`.
pub fn hash(path: &Path, max: u64) -> anyhow::Result<Hashed> {
    let (file, size) =
        match open(path, Links::Refuse).with_context(|| format!("opening {}", path.display()))? {
            Opened::Regular(file, size) => (file, size),
            Opened::Absent => return Ok(Hashed::Absent),
            Opened::Special(what) => return Ok(Hashed::Special(what)),
        };
    if size > max {
        return Ok(Hashed::TooLarge(size));
    }
    let mut digest = Sha256::new();
    let mut reader = file.take(size);
    let mut buf = vec![0; 1 << 16];
    let mut read = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        digest.update(&buf[..n]);
        read += n as u64;
    }
    Ok(Hashed::Ok(hex::encode(digest.finalize()), read))
}

/// The bytes of the regular file at `path` (links refused), which must be
/// exactly `size` bytes long, as it was when hashed.
pub fn read(path: &Path, size: u64) -> anyhow::Result<Vec<u8>> {
    let opened =
        open(path, Links::Refuse).with_context(|| format!("opening {}", path.display()))?;
    let file = match opened {
        Opened::Regular(file, now) if now == size => file,
        Opened::Regular(_, now) => anyhow::bail!(
            "{} changed while it was read: {now} bytes, {size} before",
            path.display()
        ),
        Opened::Absent => anyhow::bail!("{} disappeared while it was read", path.display()),
        Opened::Special(what) => anyhow::bail!("{} is {what}, not a regular file", path.display()),
    };
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(size)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_named_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            hash(&fifo, u64::MAX).unwrap(),
            Hashed::Special("a FIFO")
        ));
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(matches!(
            hash(&zero, u64::MAX).unwrap(),
            Hashed::Special("a symbolic link")
        ));
        assert!(matches!(
            open(&zero, Links::Follow).unwrap(),
            Opened::Special("a character device")
        ));
        assert!(matches!(
            hash(&dir.path().join("none"), u64::MAX).unwrap(),
            Hashed::Absent
        ));
    }

    #[test]
    fn reads_are_bounded_by_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        std::fs::write(&path, b"hello").unwrap();
        let Hashed::Ok(sha, 5) = hash(&path, 5).unwrap() else {
            panic!("not hashed");
        };
        assert_eq!(sha, crate::blobs::blob_ref(b"hello"));
        assert!(matches!(hash(&path, 4).unwrap(), Hashed::TooLarge(5)));
        assert_eq!(read(&path, 5).unwrap(), b"hello");
        assert!(read(&path, 4).is_err(), "a changed size is refused");
    }
}
