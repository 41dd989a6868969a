//! `abstore token mint` and `abstore token inspect`: the operator's side of
//! the token model (docs/security.md).

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use clap::{Args, Subcommand};

use super::SecretArgs;
use crate::auth::{self, Scope, ScopeKind, Via};
use crate::clock::{Clock as _, SystemClock};
use crate::protocol::time::{format_iso, parse_iso};

/// `abstore token …`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a signed token for one scope.
    Mint(MintArgs),
    /// Print a token's scope and expiry; with a secret, whether it verifies.
    Inspect {
        token: String,
        #[command(flatten)]
        secret: SecretArgs,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["admin", "build", "repo", "session", "deployment"])))]
pub struct MintArgs {
    #[command(flatten)]
    pub secret: SecretArgs,
    /// Admin: every resource (legacy `build: "*"` scope).
    #[arg(long)]
    pub admin: bool,
    /// Exactly this build.
    #[arg(long, value_name = "SLUG")]
    pub build: Option<String>,
    /// Exactly this repository (and its session collection).
    #[arg(long, value_name = "ID")]
    pub repo: Option<String>,
    /// Exactly this operator session.
    #[arg(long, value_name = "OS_ID")]
    pub session: Option<String>,
    /// A deployment scope: raw store routes, like admin.
    #[arg(long)]
    pub deployment: bool,
    /// Agent session the token's event writes must be attributed to (`*` = any actor).
    #[arg(
        long,
        value_name = "S",
        default_value = "*",
        conflicts_with = "deployment"
    )]
    pub agent_session: String,
    /// Stamp `via: {kind: session, id}` onto human actors of writes.
    #[arg(long, value_name = "ID", conflicts_with_all = ["via_mcp", "admin"])]
    pub via_session: Option<String>,
    /// Stamp `via: {kind: mcp, client}` onto human actors of writes.
    #[arg(long, value_name = "CLIENT", conflicts_with = "admin")]
    pub via_mcp: Option<String>,
    /// Lifetime: a number with a unit, `ms`, `s`, `m`, `h` or `d` (e.g. `1h`).
    #[arg(long, env = "ABSTORE_TOKEN_TTL", default_value = "1h")]
    pub ttl: String,
    /// Count the lifetime from this ISO time instead of now (for test clocks).
    #[arg(long, value_name = "ISO")]
    pub now: Option<String>,
}

/// `abstore token mint|inspect`: the token or its description on stdout.
pub fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Mint(args) => println!("{}", mint(&args)?),
        TokenCommand::Inspect { token, secret } => print!("{}", inspect(&token, &secret)?),
    }
    Ok(())
}

/// Build the scope `args` describe and sign it.
pub fn mint(args: &MintArgs) -> anyhow::Result<String> {
    let secret = args
        .secret
        .resolve()?
        .context("token mint needs the secret: --secret, --secret-file or ABSTORE_SECRET")?;
    let now = match &args.now {
        Some(text) => parse_iso(text)
            .with_context(|| format!("--now {text:?} is not an ISO-8601 UTC time"))?,
        None => SystemClock.now_ms(),
    };
    let exp = now
        .checked_add(parse_ttl(&args.ttl)?)
        .context("--ttl is too large")?;
    let via = match (&args.via_session, &args.via_mcp) {
        (Some(id), None) => Some(Via::Session { id: id.clone() }),
        (None, Some(client)) => Some(Via::Mcp {
            client: client.clone(),
        }),
        _ => None,
    };
    let session = args.agent_session.clone();
    let resource = |kind, id: &String| Scope::Resource {
        kind,
        id: id.clone(),
        session: session.clone(),
        via: via.clone(),
        exp,
    };
    let scope = if args.admin {
        Scope::Legacy {
            build: auth::WILDCARD.into(),
            session: session.clone(),
            exp,
        }
    } else if let Some(slug) = &args.build {
        resource(ScopeKind::Build, slug)
    } else if let Some(repo) = &args.repo {
        resource(ScopeKind::Repo, repo)
    } else if let Some(id) = &args.session {
        resource(ScopeKind::Session, id)
    } else if args.deployment {
        Scope::Deployment {
            session: auth::WILDCARD.into(),
            via: via.clone(),
            exp,
        }
    } else {
        bail!("choose a scope: --admin, --build, --repo, --session or --deployment");
    };
    Ok(secret.mint(&scope))
}

/// Describe a token; verify it when a secret is given.
pub fn inspect(token: &str, secret: &SecretArgs) -> anyhow::Result<String> {
    let payload = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .context("the token's first segment is not base64url")?;
    let scope: serde_json::Value =
        serde_json::from_slice(&bytes).context("the token's scope is not JSON")?;
    let mut out = format!("scope: {scope}\n");
    if let Some(exp) = scope.get("exp").and_then(serde_json::Value::as_i64) {
        let state = if exp <= SystemClock.now_ms() {
            "expired"
        } else {
            "not expired"
        };
        out.push_str(&format!("expires: {} ({state})\n", format_iso(exp)));
    }
    if let Some(secret) = secret.resolve()? {
        // Judge the signature and shape apart from expiry: verify as of the
        // epoch, against every secret of the source.
        let verdict = if secret.verify(token, i64::MIN).is_ok() {
            "valid"
        } else {
            "INVALID"
        };
        out.push_str(&format!("signature and scope: {verdict}\n"));
    }
    Ok(out)
}

/// `30s`, `15m`, `1h`, `7d`, `500ms` → milliseconds.
fn parse_ttl(text: &str) -> anyhow::Result<i64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits
        .parse()
        .with_context(|| format!("--ttl {text:?}: expected a number with a unit such as 1h"))?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => bail!("--ttl {text:?}: the unit must be ms, s, m, h or d"),
    };
    n.checked_mul(factor)
        .with_context(|| format!("--ttl {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("1h").unwrap(), 3_600_000);
        assert_eq!(parse_ttl("500ms").unwrap(), 500);
        assert_eq!(parse_ttl("7d").unwrap(), 604_800_000);
        for bad in ["", "h", "1", "1w", "-1h", "1.5h"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}
