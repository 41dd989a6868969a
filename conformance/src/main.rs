//! `abstore-conformance`: runs the protocol conformance checks against any
//! server of Autobuild's Remote BuildStore protocol.

use std::io::Write as _;
use std::process::ExitCode;

use abstore_conformance::fixtures::{catalog_fixtures_of, catalog_set, names_identity};
use abstore_conformance::runner::check_credentials;
use abstore_conformance::{
    Ctx, authenticate, checks_for, every_check, is_abstore_specific, run_checks,
};
use clap::Parser;

/// Black-box HTTP conformance checks for Autobuild's Remote BuildStore protocol.
#[derive(Parser, Debug)]
#[command(name = "abstore-conformance", version)]
struct Args {
    /// Base URL of the server under test, e.g. http://127.0.0.1:8787
    #[arg(long, env = "ABSTORE_CONFORMANCE_URL")]
    url: String,
    /// Autobuild package version the client claims (and the server must serve),
    /// with protocol 2; `--client VERSION/PROTOCOL` names both.
    #[arg(long, default_value = "0.8.0")]
    autobuild_version: String,
    /// The client identity every check sends (`X-Autobuild-Version` /
    /// `X-Autobuild-Protocol-Version`) and expects from `/health`, e.g.
    /// `0.8.0/2` (the default). The protocol selects the checks (a
    /// protocol-3 identity adds the `p3.*` checks), and the identity the
    /// catalog fixtures: those of the catalog set abstore's index serves it
    /// (`0.8.0/3` and `0.9.0/3`: the 0.9.0 catalogs; an identity the index
    /// does not name: the default set's).
    #[arg(long, value_name = "VERSION/PROTOCOL", conflicts_with = "autobuild_version", value_parser = parse_client)]
    client: Option<(String, String)>,
    /// Run only checks whose id contains this substring.
    #[arg(long)]
    filter: Option<String>,
    /// The server's decoded-byte artifact ceiling.
    #[arg(long, default_value_t = 1_048_576)]
    max_artifact_bytes: usize,
    /// How many clock-free checks run at once.
    #[arg(long, default_value_t = 8)]
    jobs: usize,
    /// The server's token signing secret: the suite mints an admin token for
    /// every check and runs the section 7 authentication checks. Without it
    /// (and without --token) the server must be in open mode.
    #[arg(long, env = "ABSTORE_CONFORMANCE_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// A bearer token to send on every request instead of a minted admin
    /// token (e.g. a deployment token when the secret is not at hand; checks
    /// that mint tokens then skip).
    #[arg(long, env = "ABSTORE_CONFORMANCE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the catalog fixtures from this directory, laid out like the
    /// workspace's `fixtures/catalog` (`<family>/<type>/*.json`, and
    /// `<set>/inherit.json` with `<set>/<family>/…` for another catalog set),
    /// instead of the copy embedded at build time.
    #[arg(long)]
    catalog_fixtures: Option<std::path::PathBuf>,
    /// Run only what the protocol requires: skip the `abstore.*` checks,
    /// which assert abstore's own choices (message details, limit defaults),
    /// so the suite can hold any server to the spec alone.
    #[arg(long)]
    strict_spec: bool,
    /// List the check ids with their spec sections and exit.
    #[arg(long)]
    list: bool,
    /// Trust the PEM certificates in this file (a private CA) for an
    /// `https://` URL, in addition to the system's trust store.
    #[arg(long, env = "ABSTORE_CONFORMANCE_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// Accept any TLS certificate (self-signed test fronts only).
    #[arg(long)]
    insecure: bool,
}

/// `VERSION/PROTOCOL`, both nonempty.
fn parse_client(text: &str) -> Result<(String, String), String> {
    match text.rsplit_once('/') {
        Some((version, protocol)) if !version.is_empty() && !protocol.is_empty() => {
            Ok((version.to_owned(), protocol.to_owned()))
        }
        _ => Err(format!(
            "expected VERSION/PROTOCOL, e.g. 0.8.0/2, not {text:?}"
        )),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = args.catalog_fixtures.clone()
        && let Err(e) = abstore_conformance::fixtures::set_catalog_dir(dir)
    {
        eprintln!("--catalog-fixtures: {e}");
        return ExitCode::from(2);
    }
    if args.list {
        for c in every_check() {
            let clock = if c.clock { " (test clock)" } else { "" };
            println!(
                "{}  §{}  protocol {}+{clock}",
                c.id, c.section, c.min_protocol
            );
        }
        return ExitCode::SUCCESS;
    }
    let tls = abstore_conformance::Tls {
        ca_file: args.ca_file.clone(),
        insecure: args.insecure,
    };
    let (version, protocol) = args.client.clone().unwrap_or_else(|| {
        (
            args.autobuild_version.clone(),
            abstore_conformance::PROTOCOL_VERSION.to_owned(),
        )
    });
    let mut ctx = match Ctx::with_tls(&args.url, &version, &tls) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot build an HTTP client: {e}");
            return ExitCode::from(2);
        }
    };
    ctx.protocol_version = protocol;
    ctx.max_artifact_bytes = args.max_artifact_bytes;
    // Pre-flight: a server that cannot be reached would fail every check with
    // the same transport error; say it once instead.
    if let Err(e) = ctx.get("/health").no_identity().send().await {
        eprintln!("cannot reach {}: {e}", ctx.base);
        return ExitCode::from(2);
    }
    if let Err(e) = authenticate(&mut ctx, args.secret.as_deref(), args.token.as_deref()).await {
        eprintln!("cannot set up authenticated mode against {}: {e}", ctx.base);
        return ExitCode::from(2);
    }
    if let Err(e) = check_credentials(&ctx).await {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // The checks of the protocol this run speaks (and of earlier ones), with
    // the catalog fixtures of the catalogs the server serves its identity.
    let set = catalog_set(&version, &ctx.protocol_version);
    if let Err(e) = catalog_fixtures_of(&set) {
        eprintln!("catalog fixtures of set {set}: {e}");
        return ExitCode::from(2);
    }
    if !names_identity(&version, &ctx.protocol_version) {
        println!(
            "note: abstore's catalog index does not name {version}/{}; sending the default catalog set's fixtures ({set})",
            ctx.protocol_version
        );
    }
    let (checks, abstore_only): (Vec<_>, Vec<_>) = checks_for(&version, &ctx.protocol_version)
        .into_iter()
        .partition(|c| !(args.strict_spec && is_abstore_specific(&c.id)));
    for c in abstore_only
        .iter()
        .filter(|c| args.filter.as_deref().is_none_or(|f| c.id.contains(f)))
    {
        println!("skip {}: abstore-specific (--strict-spec)", c.id);
    }
    let report = run_checks(
        &ctx,
        checks,
        args.filter.as_deref(),
        args.jobs,
        |id, outcome| {
            println!("{}", outcome.line(id));
            let _ = std::io::stdout().flush();
        },
    )
    .await;
    println!("{}", report.summary());
    if report.failed() > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
