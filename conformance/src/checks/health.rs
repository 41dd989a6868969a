//! Section 11: `GET /health` is always open and returns exactly
//! `{"ok":true,"autobuildVersion":"<package>","protocolVersion":"2"}` — the
//! identity the runner sends (`--client`, default `0.8.0/2`), which must be
//! the server's one (or, with several, its first) accepted identity.

use serde_json::json;

use super::{CheckResult, Registry};
use crate::client::{Ctx, same};

pub fn register(r: &mut Registry) {
    r.add("s11.health.exact_body", "11", exact);
    r.add("s11.health.no_identity_headers_needed", "11", no_headers);
    r.add("s11.health.wrong_identity_still_ok", "11", wrong_identity);
}

async fn exact(c: Ctx) -> CheckResult {
    let r = c.get("/health").send().await?;
    let v = r.json_status(200)?;
    let want = json!({"ok": true, "autobuildVersion": c.autobuild_version, "protocolVersion": c.protocol_version});
    same(&format!("GET /health body (sent {})", r.sent), &v, &want)?;
    Ok(())
}

async fn no_headers(c: Ctx) -> CheckResult {
    let r = c.get("/health").no_identity().send().await?;
    let v = r.json_status(200)?;
    let want = json!({"ok": true, "autobuildVersion": c.autobuild_version, "protocolVersion": c.protocol_version});
    same("GET /health without identity headers", &v, &want)?;
    Ok(())
}

async fn wrong_identity(c: Ctx) -> CheckResult {
    let r = c
        .get("/health")
        .version(Some("0.0.1"))
        .protocol(Some("1"))
        .send()
        .await?;
    let v = r.json_status(200)?;
    let want = json!({"ok": true, "autobuildVersion": c.autobuild_version, "protocolVersion": c.protocol_version});
    same("GET /health with mismatched identity headers", &v, &want)?;
    Ok(())
}
