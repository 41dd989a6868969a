//! `abstore token mint | inspect | revoke | revocations`: the operator's side
//! of the token model (docs/security.md).

use std::io::Write as _;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use clap::{Args, Subcommand};

use super::SecretArgs;
use crate::auth::{self, MaxLifetime, Scope, ScopeKind, Via};
use crate::clock::{Clock as _, SystemClock};
use crate::protocol::time::{format_iso, parse_iso};
use crate::store::Revocation;

/// `abstore token …`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a signed token for one scope.
    Mint(MintArgs),
    /// Print a token's scope, expiry and digest; with a secret, whether it verifies.
    Inspect {
        token: String,
        #[command(flatten)]
        secret: SecretArgs,
    },
    /// Revoke one token on every server of a store (within their
    /// `--revocation-refresh-seconds`): give the token, or its digest as
    /// `token inspect` prints it.
    Revoke(RevokeArgs),
    /// List the revoked tokens of a store; with `--prune`, first forget
    /// those whose token has expired anyway.
    Revocations(RevocationsArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["token", "digest"])))]
pub struct RevokeArgs {
    /// The token to revoke (its expiry is kept, so the revocation can be
    /// pruned once it has passed).
    pub token: Option<String>,
    /// The SHA-256 of the token's text (64 hex digits, as `token inspect`
    /// prints it), when the token itself is not at hand.
    #[arg(long, value_name = "HEX")]
    pub digest: Option<String>,
    /// The store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// Why, for whoever lists the revocations later.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

#[derive(Debug, Args)]
pub struct RevocationsArgs {
    /// The store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// First forget the revocations of tokens that have expired (they are
    /// refused as expired anyway). A flag only.
    #[arg(long)]
    pub prune: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["admin", "build", "repo", "session", "deployment", "operator_user"])))]
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
    /// A person's operator scope (`{"operator": {"user": NAME}}`, as
    /// Autobuild's operator API has it): signs in to the web console and
    /// its ticket actions are recorded under NAME; refused on the protocol
    /// routes.
    #[arg(long, value_name = "NAME", conflicts_with = "agent_session")]
    pub operator_user: Option<String>,
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

/// `abstore token …`: the token, its description, or what changed, on stdout.
pub async fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Mint(args) => println!("{}", mint(&args)?),
        TokenCommand::Inspect { token, secret } => print!("{}", inspect(&token, &secret)?),
        TokenCommand::Revoke(args) => println!("{}", revoke(&args).await?),
        TokenCommand::Revocations(args) => print!("{}", revocations(&args).await?),
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
    let ttl = parse_ttl(&args.ttl)?;
    let exp = now.checked_add(ttl).context("--ttl is too large")?;
    if !MaxLifetime::DEFAULT.admits(exp, now) {
        // `writeln!`, not `eprintln!`: a closed stderr must not panic.
        let _ = writeln!(
            std::io::stderr(),
            "warning: --ttl {} is longer than the servers' default --max-token-lifetime ({}): \
             a server started without a longer one refuses this token",
            args.ttl,
            MaxLifetime::DEFAULT
        );
    }
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
    } else if let Some(user) = &args.operator_user {
        if user.trim().is_empty() {
            bail!("--operator-user must name someone (nonblank)");
        }
        Scope::Operator {
            user: user.clone(),
            via: via.clone(),
            exp,
        }
    } else {
        bail!(
            "choose a scope: --admin, --build, --repo, --session, --deployment or --operator-user"
        );
    };
    Ok(secret.mint(&scope))
}

/// A token's scope JSON, read without verifying anything (no secret needed).
fn payload(token: &str) -> anyhow::Result<serde_json::Value> {
    let payload = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .context("the token's first segment is not base64url")?;
    serde_json::from_slice(&bytes).context("the token's scope is not JSON")
}

/// Describe a token; verify it when a secret is given.
pub fn inspect(token: &str, secret: &SecretArgs) -> anyhow::Result<String> {
    let scope = payload(token)?;
    let mut out = format!("scope: {scope}\n");
    if let Some(exp) = scope.get("exp").and_then(serde_json::Value::as_i64) {
        let state = if exp <= SystemClock.now_ms() {
            "expired"
        } else {
            "not expired"
        };
        out.push_str(&format!("expires: {} ({state})\n", format_iso(exp)));
    }
    // What `token revoke --digest` takes: the digest of the text a server
    // sees (the bearer credential, surrounding whitespace trimmed).
    out.push_str(&format!(
        "digest: {}\n",
        hex::encode(auth::digest(token.trim()))
    ));
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

/// `--ttl`: a duration (`auth::parse_duration_ms`, the one parser).
fn parse_ttl(text: &str) -> anyhow::Result<i64> {
    auth::parse_duration_ms(text).map_err(|err| anyhow::anyhow!("--ttl {err}"))
}

/// `abstore token revoke`: what was done, one line.
pub async fn revoke(args: &RevokeArgs) -> anyhow::Result<String> {
    let (digest, expires_at) = match (&args.token, &args.digest) {
        (Some(token), None) => {
            let token = token.trim();
            let scope = payload(token).context(
                "that is not a token (give the token exactly as issued, without `Bearer `, \
                 or its --digest)",
            )?;
            let exp = scope
                .get("exp")
                .and_then(serde_json::Value::as_i64)
                .context("the token's scope has no integer \"exp\"")?;
            (hex::encode(auth::digest(token)), Some(exp))
        }
        (None, Some(digest)) => {
            let digest = digest.trim().to_ascii_lowercase();
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!(
                    "--digest must be 64 hex digits (the SHA-256 `abstore token inspect` prints)"
                );
            }
            (digest, None)
        }
        _ => bail!("give the token or --digest, not both"),
    };
    let note = match &args.note {
        Some(note) if note.len() > crate::revocation::MAX_NOTE_BYTES || note.contains('\0') => {
            bail!(
                "--note must be at most {} bytes, without NUL",
                crate::revocation::MAX_NOTE_BYTES
            )
        }
        note => note.clone(),
    };
    let store = super::open_store(&args.database, true).await?;
    let revocation = Revocation {
        digest: digest.clone(),
        expires_at,
        revoked_at: SystemClock.now_ms(),
        note,
    };
    let expiry = expires_at.map_or_else(
        || "no known expiry".to_owned(),
        |exp| format!("the token expires {}", format_iso(exp)),
    );
    Ok(if store.revoke_token(revocation).await? {
        format!(
            "revoked {digest} ({expiry}); every server of this store refuses it within its \
             --revocation-refresh-seconds"
        )
    } else {
        format!("already revoked: {digest}")
    })
}

/// `abstore token revocations`: one line per revoked token.
pub async fn revocations(args: &RevocationsArgs) -> anyhow::Result<String> {
    let store = super::open_store(&args.database, true).await?;
    let mut out = String::new();
    if args.prune {
        let pruned = store.prune_revocations(SystemClock.now_ms()).await?;
        out.push_str(&format!("pruned {pruned} revocations of expired tokens\n"));
    }
    let all = store.revocations().await?;
    for r in &all {
        let expires = r
            .expires_at
            .map_or_else(|| "unknown".to_owned(), format_iso);
        out.push_str(&format!(
            "{}  revoked {}  expires {expires}",
            r.digest,
            format_iso(r.revoked_at)
        ));
        if let Some(note) = &r.note {
            out.push_str(&format!("  {note:?}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{} revoked tokens\n", all.len()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("1h").unwrap(), 3_600_000);
        for bad in ["", "h", "1", "1w", "-1h", "1.5h"] {
            let err = parse_ttl(bad).unwrap_err().to_string();
            assert!(err.starts_with("--ttl "), "{err}");
        }
    }
}
