//! Output files that appear whole or not at all: written under a temporary
//! name in the destination's directory, fsynced, then renamed into place.
//! The temporary name is removed if the command fails or is interrupted
//! (`temp::exit_on_signal`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

pub struct AtomicOutput {
    path: PathBuf,
    tmp: PathBuf,
    force: bool,
    committed: bool,
}

impl AtomicOutput {
    /// Reserves a temporary name next to `path` (nothing is created yet).
    /// Refuses an existing `path` unless `force`.
    pub fn new(path: &Path, force: bool) -> anyhow::Result<AtomicOutput> {
        if path.exists() && !force {
            bail!("{} exists; pass --force to overwrite it", path.display());
        }
        let name = path
            .file_name()
            .with_context(|| format!("{} is not a file name", path.display()))?
            .to_string_lossy();
        let tmp = path.with_file_name(format!(".{name}.tmp-{:016x}", rand::random::<u64>()));
        super::temp::register(&tmp);
        Ok(AtomicOutput {
            path: path.to_path_buf(),
            tmp,
            force,
            committed: false,
        })
    }

    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Fsyncs the temporary file, moves it into place and fsyncs the directory.
    pub fn commit(mut self) -> anyhow::Result<()> {
        std::fs::File::open(&self.tmp)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("syncing {}", self.tmp.display()))?;
        if self.force {
            std::fs::rename(&self.tmp, &self.path)
        } else {
            // A hard link never replaces an existing file, unlike rename.
            std::fs::hard_link(&self.tmp, &self.path).and_then(|()| std::fs::remove_file(&self.tmp))
        }
        .with_context(|| format!("moving the result to {}", self.path.display()))?;
        super::temp::forget(&self.tmp);
        self.committed = true;
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if let Ok(dir) = std::fs::File::open(dir) {
            dir.sync_all().ok();
        }
        Ok(())
    }
}

impl Drop for AtomicOutput {
    fn drop(&mut self) {
        super::temp::forget(&self.tmp);
        if !self.committed {
            std::fs::remove_file(&self.tmp).ok();
        }
    }
}
