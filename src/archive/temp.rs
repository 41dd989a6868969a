//! Private temporary files for the archive commands (docs/security.md,
//! "Files we import"). What an import copies of a store (its database, the
//! archive it writes) holds every event and blob of it, so it lives in a
//! directory only its owner may enter (mode 0700, made by `tempfile`), each
//! file created 0600, under `--temp-dir` or the system's temporary
//! directory. It is removed however the command ends: when dropped (success,
//! an error, a panic unwinding), or on SIGINT or SIGTERM by
//! [`exit_on_signal`], which removes every path still registered here before
//! the process exits. (Waiting for the command to unwind instead could take
//! as long as the read a blocked thread is in.)

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context as _;

use super::source_files::{self, Links, Opened};

/// Every temporary directory and file alive now, for [`remove_all`].
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // A panic elsewhere while holding the lock leaves the list intact.
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes `path` (a file, or a directory with its contents) when the
/// process is interrupted, unless [`forget`] was called first.
pub fn register(path: &Path) {
    live().push(path.to_path_buf());
}

/// `path` is removed, kept or renamed by its owner: an interruption no
/// longer touches it.
pub fn forget(path: &Path) {
    live().retain(|p| p != path);
}

/// Removes every registered path now.
pub fn remove_all() {
    let paths = std::mem::take(&mut *live());
    for path in paths {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path).ok(),
            Ok(_) => std::fs::remove_file(&path).ok(),
            Err(_) => None,
        };
    }
}

/// Where temporary directories go: `--temp-dir`, or the system's temporary
/// directory (`TMPDIR` if set).
pub fn base(temp_dir: Option<&Path>) -> PathBuf {
    temp_dir.map_or_else(std::env::temp_dir, Path::to_path_buf)
}

/// The file in each temporary directory that its process holds locked
/// (`flock`) while the directory lives: one whose lock nobody holds was left
/// by a process that could not clean up (`SIGKILL`), and [`sweep`] removes it.
const LOCK: &str = ".abstore-lock";

/// How long a directory must have been left unchanged before [`sweep`]
/// takes it for abandoned: one being created has no lock yet.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// A private directory (0700) under a base directory, removed with its
/// contents when dropped or when the process is interrupted.
pub struct TempDir {
    dir: tempfile::TempDir,
    /// Held for the directory's life ([`LOCK`]).
    _lock: std::fs::File,
}

impl TempDir {
    pub fn new_in(base: &Path, prefix: &str) -> anyhow::Result<TempDir> {
        use std::os::unix::fs::PermissionsExt as _;
        // tempfile's directories follow the umask (0755 usually): private
        // needs asking for.
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(base)
            .with_context(|| {
                format!(
                    "creating a private temporary directory in {} (--temp-dir)",
                    base.display()
                )
            })?;
        register(dir.path());
        let lock = create_private(&dir.path().join(LOCK))
            .and_then(|file| file.try_lock().map(|()| file).map_err(std::io::Error::from))
            .with_context(|| format!("locking {}", dir.path().display()))?;
        Ok(TempDir { dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        forget(self.dir.path());
        // `tempfile::TempDir`'s own drop removes the directory.
    }
}

/// Removes the directories named `prefix…` under `base` that a killed
/// process left behind: nobody holds their lock, and nothing in them changed
/// for a minute. Returns how many it removed. A directory it cannot enter
/// (another user's) or remove is left alone.
pub fn sweep(base: &Path, prefix: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        // Not through a link: `DirEntry::metadata` does not follow one.
        let Ok(meta) = entry.metadata() else { continue };
        let abandoned = meta.is_dir()
            && meta
                .modified()
                .ok()
                .and_then(|at| at.elapsed().ok())
                .is_some_and(|age| age >= ABANDONED_AFTER);
        if !abandoned {
            continue;
        }
        let dir = entry.path();
        let Ok(Opened::Regular(lock, _)) = source_files::open(&dir.join(LOCK), Links::Refuse)
        else {
            continue;
        };
        if lock.try_lock().is_ok() && std::fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Creates `path`, which must not exist, readable and writable by its
/// owner only (0600).
pub fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Copies the regular file at `from` (opened as [`source_files::open`]
/// opens a file someone else wrote) to a new private file `to` (0600):
/// exactly the bytes it held when opened. `Ok(false)` when `from` does not
/// exist; an error naming it when it is not a regular file.
pub fn copy(from: &Path, to: &Path, links: Links) -> anyhow::Result<bool> {
    let (file, size) = match source_files::open(from, links)
        .with_context(|| format!("opening {}", from.display()))?
    {
        Opened::Regular(file, size) => (file, size),
        Opened::Absent => return Ok(false),
        Opened::Special(what) => {
            anyhow::bail!("{} is {what}, not a regular file", from.display())
        }
    };
    let mut out = create_private(to).with_context(|| format!("creating {}", to.display()))?;
    let copied = std::io::copy(&mut file.take(size), &mut out)
        .with_context(|| format!("copying {}", from.display()))?;
    if copied != size {
        anyhow::bail!(
            "{} shrank while it was copied ({copied} of {size} bytes)",
            from.display()
        );
    }
    Ok(true)
}

/// Answers SIGINT and SIGTERM while it is alive: removes every registered
/// path, prints `error: <what> was interrupted by SIGINT; <after>` and exits
/// with 128 plus the signal's number. Dropping it stops listening.
pub struct ExitOnSignal(tokio::task::JoinHandle<()>);

/// See [`ExitOnSignal`]; `after` says what became of the command's work.
pub fn exit_on_signal(what: &str, after: &str) -> ExitOnSignal {
    let message = format!("{what} was interrupted by {{signal}}; {after}");
    ExitOnSignal(tokio::spawn(async move {
        let (name, number) = interrupted().await;
        remove_all();
        let _ = writeln!(
            std::io::stderr(),
            "error: {}",
            message.replace("{signal}", name)
        );
        std::process::exit(128 + number);
    }))
}

impl Drop for ExitOnSignal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The first SIGINT or SIGTERM: its name and number. (A signal that cannot
/// be listened for is never reported.)
async fn interrupted() -> (&'static str, i32) {
    use tokio::signal::unix::{SignalKind, signal};
    let wait = |kind: SignalKind| async move {
        match signal(kind) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = wait(SignalKind::interrupt()) => ("SIGINT", libc::SIGINT),
        () = wait(SignalKind::terminate()) => ("SIGTERM", libc::SIGTERM),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn directories_and_files_are_private_and_removed() {
        let base = tempfile::tempdir().unwrap();
        let dir = TempDir::new_in(base.path(), "abstore-test-").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.path()), 0o700);
        let file = dir.path().join("f");
        create_private(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert!(
            create_private(&file).is_err(),
            "never over an existing file"
        );
        let path = dir.path().to_path_buf();
        assert!(live().contains(&path));
        drop(dir);
        assert!(!path.exists());
        assert!(!live().contains(&path));
    }

    #[test]
    fn a_panic_unwinding_removes_the_directory() {
        let base = tempfile::tempdir().unwrap();
        let caught = std::panic::catch_unwind(|| {
            let dir = TempDir::new_in(base.path(), "abstore-test-").unwrap();
            std::fs::write(dir.path().join("copy"), b"secret").unwrap();
            panic!("mid-import");
        });
        assert!(caught.is_err());
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }

    #[test]
    fn sweep_removes_only_unlocked_abandoned_directories() {
        let base = tempfile::tempdir().unwrap();
        let live = TempDir::new_in(base.path(), "abstore-x-").unwrap();
        // A killed process's: its lock file, held by nobody.
        let left = base.path().join("abstore-x-left");
        std::fs::create_dir(&left).unwrap();
        std::fs::write(left.join(LOCK), b"").unwrap();
        std::fs::write(left.join("store.archive"), b"secret").unwrap();
        let other = base.path().join("unrelated");
        std::fs::create_dir(&other).unwrap();
        // Too recent: could be one being created.
        assert_eq!(sweep(base.path(), "abstore-x-"), 0);
        let old = std::time::SystemTime::now() - 2 * ABANDONED_AFTER;
        for dir in [live.path(), &left, &other] {
            std::fs::File::open(dir).unwrap().set_modified(old).unwrap();
        }
        assert_eq!(sweep(base.path(), "abstore-x-"), 1);
        assert!(!left.exists());
        assert!(live.path().exists(), "a live directory's lock is held");
        assert!(other.exists());
    }

    #[test]
    fn copies_take_regular_files_only_exactly_as_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        std::fs::write(&path, b"hello").unwrap();
        let to = dir.path().join("copy");
        assert!(copy(&path, &to, Links::Refuse).unwrap());
        assert_eq!(std::fs::read(&to).unwrap(), b"hello");
        let mode = std::fs::metadata(&to).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!copy(&dir.path().join("none"), &to, Links::Refuse).unwrap());
        // Never read whole: a link to an endless device is refused.
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = copy(&zero, &dir.path().join("copy2"), Links::Follow).unwrap_err();
        assert!(err.to_string().contains("is a character device"), "{err}");
        let err = copy(&zero, &dir.path().join("copy3"), Links::Refuse).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
    }

    #[test]
    fn remove_all_removes_what_is_registered() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("x"), b"x").unwrap();
        let file = base.path().join("f");
        std::fs::write(&file, b"f").unwrap();
        register(&dir);
        register(&file);
        remove_all();
        assert!(!dir.exists() && !file.exists());
    }
}
