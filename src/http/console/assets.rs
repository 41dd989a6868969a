//! The console's stylesheet and script, embedded in the binary and served
//! under content-hashed names (`console.<hash>.css`) with immutable
//! caching: a new binary's changed asset has a new name, so no browser
//! keeps a stale one. Nothing is fetched from another origin.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest as _, Sha256};

/// One embedded asset.
struct Asset {
    stem: &'static str,
    extension: &'static str,
    content_type: &'static str,
    body: &'static str,
}

impl Asset {
    /// `<stem>.<first 16 hex digits of its SHA-256>.<ext>`.
    fn hashed_name(&self) -> String {
        let digest = hex::encode(Sha256::digest(self.body.as_bytes()));
        format!("{}.{}.{}", self.stem, &digest[..16], self.extension)
    }
}

const STYLE: usize = 0;
const SCRIPT: usize = 1;

static ASSETS: [Asset; 2] = [
    Asset {
        stem: "console",
        extension: "css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/console.css"),
    },
    Asset {
        stem: "console",
        extension: "js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/console.js"),
    },
];

/// Each asset's hashed name, computed once.
static NAMES: LazyLock<[String; 2]> = LazyLock::new(|| ASSETS.each_ref().map(Asset::hashed_name));

/// Where pages link the stylesheet.
pub fn style_path() -> String {
    format!("/console/assets/{}", NAMES[STYLE])
}

/// Where pages load the script from.
pub fn script_path() -> String {
    format!("/console/assets/{}", NAMES[SCRIPT])
}

/// `GET /console/assets/{name}`: the asset of that exact hashed name.
pub async fn serve(Path(name): Path<String>) -> Response {
    let Some(at) = NAMES.iter().position(|hashed| *hashed == name) else {
        return super::headers::secured(StatusCode::NOT_FOUND.into_response());
    };
    let asset = &ASSETS[at];
    let mut response = ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    super::headers::secured(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_content_hash() {
        let path = style_path();
        assert!(path.starts_with("/console/assets/console.") && path.ends_with(".css"));
        assert_eq!(
            path.len(),
            "/console/assets/console.".len() + 16 + ".css".len()
        );
        assert!(script_path().ends_with(".js"));
    }
}
