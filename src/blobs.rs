//! Content-addressed artifact bytes over `object_store` (local directory,
//! memory, or any object-store URL). Blobs are written before the metadata
//! transaction; metadata is the visibility boundary, so an orphaned blob
//! after a failed deposit is harmless (spec section 8).
//!
//! A local directory is opened with `object_store`'s fsync mode: a `put`
//! returns only once the file's bytes and every directory entry leading to it
//! are on stable storage, so metadata committed afterwards can never point to
//! a blob a power loss took away (remote stores give that on success anyway).

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use sha2::{Digest as _, Sha256};

#[derive(Clone)]
pub struct Blobs {
    store: Arc<dyn ObjectStore>,
    /// The last write probe's time and result, shared so that readiness
    /// checks, however frequent, write at most once per [`PROBE_INTERVAL`].
    last_probe: Arc<tokio::sync::Mutex<Option<Probe>>>,
}

/// When a write probe ran and what it found.
type Probe = (Instant, Result<(), String>);

/// How long a write probe's result stands for readiness.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// The key readiness writes and deletes (outside the `sha256/` tree).
const PROBE_KEY: &str = "readiness-probe";

/// The lowercase hex SHA-256 of `bytes`: the artifact's `blobRef`.
pub fn blob_ref(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn key(blob_ref: &str) -> Path {
    Path::from(format!("sha256/{}/{}", &blob_ref[..2], blob_ref))
}

impl Blobs {
    /// Open a `--blobs` location: `memory://`, an object-store URL
    /// (`file:///abs/dir`, `s3://bucket/prefix`, …; options from the
    /// environment, e.g. `AWS_ENDPOINT`), or a plain directory path.
    pub fn open(location: &str) -> anyhow::Result<Self> {
        let store: Arc<dyn ObjectStore> = if location == "memory://" || location == "memory:" {
            Arc::new(InMemory::new())
        } else if location.contains("://") {
            let url = url::Url::parse(location)?;
            if url.scheme() == "file" {
                let dir = url
                    .to_file_path()
                    .map_err(|()| anyhow::anyhow!("{location} names no local directory"))?;
                local(&dir)?
            } else {
                let (store, prefix) = object_store::parse_url_opts(&url, std::env::vars())?;
                Arc::new(PrefixStore::new(store, prefix))
            }
        } else {
            local(std::path::Path::new(location))?
        };
        Ok(Blobs {
            store,
            last_probe: Arc::default(),
        })
    }

    /// The local directory `location` names (a plain path or `file://`),
    /// or `None` for `memory://` and object-store URLs. [`Blobs::open`]
    /// creates it; a caller that must create nothing (a dry run) checks it
    /// first.
    pub fn local_dir(location: &str) -> Option<std::path::PathBuf> {
        if location == "memory://" || location == "memory:" {
            None
        } else if location.contains("://") {
            url::Url::parse(location)
                .ok()
                .filter(|url| url.scheme() == "file")
                .and_then(|url| url.to_file_path().ok())
        } else {
            Some(std::path::PathBuf::from(location))
        }
    }

    /// Store `bytes` under `blob_ref` (idempotent: identical bytes, same key).
    pub async fn put(&self, blob_ref: &str, bytes: Vec<u8>) -> object_store::Result<()> {
        self.store
            .put(&key(blob_ref), PutPayload::from(bytes))
            .await
            .map(|_| ())
    }

    /// Can a deposit write here now? Writes and deletes a small probe object
    /// (a lookup alone stays healthy on a read-only, full or deleted
    /// directory). The result stands for `PROBE_INTERVAL`; concurrent
    /// callers wait for one probe instead of writing their own.
    pub async fn check(&self) -> Result<(), String> {
        let mut last = self.last_probe.lock().await;
        if let Some((at, result)) = last.as_ref()
            && at.elapsed() < PROBE_INTERVAL
        {
            return result.clone();
        }
        let result = self.probe().await.map_err(|err| err.to_string());
        *last = Some((Instant::now(), result.clone()));
        result
    }

    async fn probe(&self) -> object_store::Result<()> {
        let key = Path::from(PROBE_KEY);
        self.store
            .put(&key, PutPayload::from_static(b"abstore readiness probe"))
            .await?;
        self.store.delete(&key).await
    }

    pub async fn get(&self, blob_ref: &str) -> object_store::Result<bytes::Bytes> {
        self.store.get(&key(blob_ref)).await?.bytes().await
    }

    /// The stored blob's size and write time, or `None` when absent.
    pub async fn head(&self, blob_ref: &str) -> object_store::Result<Option<BlobInfo>> {
        match self.store.head(&key(blob_ref)).await {
            Ok(meta) => Ok(BlobInfo::from_meta(&meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Removes a blob (garbage collection only: metadata never points at
    /// a blob that may be deleted).
    pub async fn delete(&self, blob_ref: &str) -> object_store::Result<()> {
        match self.store.delete(&key(blob_ref)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Every stored blob, in no particular order; keys that are not
    /// content addresses are not blobs and are skipped.
    pub fn list(&self) -> impl futures_util::Stream<Item = object_store::Result<BlobInfo>> + use<> {
        use futures_util::StreamExt as _;
        self.store
            .list(Some(&Path::from("sha256")))
            .filter_map(|meta| async move {
                match meta {
                    Ok(meta) => BlobInfo::from_meta(&meta).map(Ok),
                    Err(err) => Some(Err(err)),
                }
            })
    }
}

/// A stored blob as listed.
#[derive(Clone, Debug)]
pub struct BlobInfo {
    pub blob_ref: String,
    pub size: u64,
    /// Last write, epoch milliseconds.
    pub modified_ms: i64,
}

impl BlobInfo {
    fn from_meta(meta: &object_store::ObjectMeta) -> Option<BlobInfo> {
        let name = meta.location.filename()?;
        let is_ref =
            name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        is_ref.then(|| BlobInfo {
            blob_ref: name.to_string(),
            size: meta.size,
            modified_ms: meta.last_modified.timestamp_millis(),
        })
    }
}

/// A local directory store that syncs every write (see the module doc).
fn local(dir: &std::path::Path) -> anyhow::Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(dir)?;
    Ok(Arc::new(
        LocalFileSystem::new_with_prefix(dir)?.with_fsync(true),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trips_by_content_address() {
        let dir = tempfile::tempdir().unwrap();
        for location in [
            "memory://".to_string(),
            dir.path().display().to_string(),
            format!("file://{}", dir.path().join("u").display()),
        ] {
            let blobs = Blobs::open(&location).unwrap();
            let bytes = b"# Plan\n".to_vec();
            let address = blob_ref(&bytes);
            blobs.put(&address, bytes.clone()).await.unwrap();
            blobs.put(&address, bytes.clone()).await.unwrap();
            assert_eq!(
                blobs.get(&address).await.unwrap().as_ref(),
                bytes.as_slice()
            );
            assert!(blobs.get(&blob_ref(b"other")).await.is_err());
        }
    }

    /// Power-loss durability cannot be observed in a test; what can is that
    /// every local location is opened in the store's sync-on-write mode.
    #[test]
    fn local_directories_sync_every_write() {
        let dir = tempfile::tempdir().unwrap();
        for location in [
            dir.path().join("plain").display().to_string(),
            format!("file://{}", dir.path().join("url").display()),
        ] {
            let blobs = Blobs::open(&location).unwrap();
            let shown = format!("{:?}", blobs.store);
            assert!(shown.contains("fsync: true"), "{location}: {shown}");
        }
    }

    #[tokio::test]
    async fn check_writes_a_probe_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(&dir.path().display().to_string()).unwrap();
        blobs.check().await.unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn blob_ref_is_lowercase_hex_sha256() {
        assert_eq!(
            blob_ref(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
