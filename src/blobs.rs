//! Content-addressed artifact bytes over `object_store` (local directory,
//! memory, or any object-store URL). Blobs are written before the metadata
//! transaction; metadata is the visibility boundary, so an orphaned blob
//! after a failed deposit is harmless (spec section 8).

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use sha2::{Digest as _, Sha256};

#[derive(Clone)]
pub struct Blobs {
    store: Arc<dyn ObjectStore>,
}

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
                std::fs::create_dir_all(url.path())?;
            }
            let (store, prefix) = object_store::parse_url_opts(&url, std::env::vars())?;
            Arc::new(PrefixStore::new(store, prefix))
        } else {
            std::fs::create_dir_all(location)?;
            Arc::new(LocalFileSystem::new_with_prefix(location)?)
        };
        Ok(Blobs { store })
    }

    /// Store `bytes` under `blob_ref` (idempotent: identical bytes, same key).
    pub async fn put(&self, blob_ref: &str, bytes: Vec<u8>) -> object_store::Result<()> {
        self.store
            .put(&key(blob_ref), PutPayload::from(bytes))
            .await
            .map(|_| ())
    }

    /// Reachability: look up a key that never exists; "not found" is healthy.
    pub async fn check(&self) -> object_store::Result<()> {
        match self.store.head(&Path::from("readiness-probe")).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(err),
        }
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

    #[test]
    fn blob_ref_is_lowercase_hex_sha256() {
        assert_eq!(
            blob_ref(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
