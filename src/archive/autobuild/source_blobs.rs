//! Where an Autobuild store's blobs are, and reading them as hostile files
//! (docs/security.md, "Files we import"): a directory's files through
//! [`source_files`] (regular files only, no
//! links, bounded by their size), a bucket's objects bounded by the size
//! the bucket states, and nothing larger than an archive carries
//! ([`MAX_BLOB_BYTES`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use sha2::{Digest as _, Sha256};

use crate::archive::format::MAX_BLOB_BYTES;
use crate::archive::source_files::{self, Hashed};

/// Where a source's blobs are.
#[derive(Clone)]
pub enum SourceBlobs {
    /// Autobuild's local layout: `<dir>/<first two hex digits>/<sha256>`.
    Sharded(PathBuf),
    /// Autobuild's PostgreSQL deployments copied to a directory:
    /// `<dir>/<sha256>`.
    FlatDir(PathBuf),
    /// Autobuild's PostgreSQL deployments: `<prefix>/<sha256>` in an object
    /// store, read from a blocking thread through `runtime`.
    Bucket {
        store: Arc<dyn object_store::ObjectStore>,
        runtime: tokio::runtime::Handle,
    },
}

impl SourceBlobs {
    /// The file of `address` (64 hex digits, checked by the caller) in a
    /// directory layout.
    fn file(&self, address: &str) -> Option<PathBuf> {
        match self {
            SourceBlobs::Sharded(dir) => Some(dir.join(&address[..2]).join(address)),
            SourceBlobs::FlatDir(dir) => Some(dir.join(address)),
            SourceBlobs::Bucket { .. } => None,
        }
    }

    /// The directory of a local store's blobs (its orphans are counted).
    pub fn sharded_dir(&self) -> Option<&Path> {
        match self {
            SourceBlobs::Sharded(dir) => Some(dir),
            _ => None,
        }
    }

    /// The SHA-256 and size of a blob, reading at most `max` bytes (never
    /// more than [`MAX_BLOB_BYTES`]). Blocking.
    pub fn hash(&self, address: &str, max: u64) -> anyhow::Result<Hashed> {
        let max = max.min(MAX_BLOB_BYTES);
        if let Some(path) = self.file(address) {
            return source_files::hash(&path, max);
        }
        let SourceBlobs::Bucket { store, runtime } = self else {
            return Err(anyhow!("a blob layout without files or a bucket"));
        };
        let Some(bytes) = runtime.block_on(bucket_get(store.as_ref(), address, max))? else {
            return Ok(Hashed::Absent);
        };
        match bytes {
            Got::Bytes(bytes) => Ok(Hashed::Ok(
                hex::encode(Sha256::digest(&bytes)),
                bytes.len() as u64,
            )),
            Got::TooLarge(size) => Ok(Hashed::TooLarge(size)),
        }
    }

    /// The bytes of a blob already hashed at `size` bytes.
    pub async fn read(&self, address: &str, size: u64) -> anyhow::Result<bytes::Bytes> {
        if let Some(path) = self.file(address) {
            let bytes = tokio::task::spawn_blocking(move || source_files::read(&path, size))
                .await
                .map_err(|err| anyhow!("reading blob {address}: {err}"))??;
            return Ok(bytes.into());
        }
        let SourceBlobs::Bucket { store, .. } = self else {
            return Err(anyhow!("a blob layout without files or a bucket"));
        };
        match bucket_get(store.as_ref(), address, size).await? {
            Some(Got::Bytes(bytes)) if bytes.len() as u64 == size => Ok(bytes),
            Some(Got::Bytes(bytes)) => Err(anyhow!(
                "blob {address} changed while it was read: {} bytes, {size} before",
                bytes.len()
            )),
            Some(Got::TooLarge(now)) => Err(anyhow!(
                "blob {address} changed while it was read: {now} bytes, {size} before"
            )),
            None => Err(anyhow!("blob {address} disappeared while it was read")),
        }
    }
}

/// A bucket object's bytes, or its stated size when over the bound.
enum Got {
    Bytes(bytes::Bytes),
    TooLarge(u64),
}

/// A bucket object, `None` when absent; not fetched when the bucket says it
/// is larger than `max`.
async fn bucket_get(
    store: &dyn object_store::ObjectStore,
    address: &str,
    max: u64,
) -> anyhow::Result<Option<Got>> {
    use object_store::ObjectStoreExt as _;
    let found = match store.get(&object_store::path::Path::from(address)).await {
        Ok(found) => found,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(err) => {
            return Err(anyhow::Error::new(err).context(format!("reading source blob {address}")));
        }
    };
    if found.meta.size > max {
        return Ok(Some(Got::TooLarge(found.meta.size)));
    }
    let bytes = found
        .bytes()
        .await
        .with_context(|| format!("reading source blob {address}"))?;
    if bytes.len() as u64 > max {
        return Ok(Some(Got::TooLarge(bytes.len() as u64)));
    }
    Ok(Some(Got::Bytes(bytes)))
}
