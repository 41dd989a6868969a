//! docker-compose.yml stays a working example (docs/deployment.md, "Docker
//! Compose"): every key is one the Compose specification defines, in the form
//! Compose expects (typed structs that refuse unknown keys), and everything
//! abstore is told is checked against abstore itself: each `ABSTORE_*`
//! variable is one `abstore serve` reads and its value parses as abstore
//! would parse it, the command line parses, each `AWS_*` variable is one the
//! S3 client reads, and the database URL, bucket, proxy upstream, volumes and
//! dependencies agree with the services they name. `scripts/test` also runs
//! `docker compose config` on the file where Compose is installed.

use std::collections::BTreeMap;
use std::path::Path;

use clap::{CommandFactory as _, Parser as _};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Compose {
    services: BTreeMap<String, Service>,
    #[serde(default)]
    volumes: BTreeMap<String, Option<NamedVolume>>,
}

/// A named volume with Compose's defaults (no driver options are used).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedVolume {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Service {
    image: String,
    build: Option<String>,
    restart: Option<String>,
    command: Option<Vec<String>>,
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    ports: Vec<String>,
    #[serde(default)]
    volumes: Vec<String>,
    #[serde(default)]
    depends_on: BTreeMap<String, DependsOn>,
    healthcheck: Option<Healthcheck>,
    stop_grace_period: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DependsOn {
    condition: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Healthcheck {
    test: Vec<String>,
    interval: String,
    timeout: String,
    retries: u32,
}

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn compose() -> Compose {
    let text = std::fs::read_to_string(repo("docker-compose.yml")).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("docker-compose.yml: {e}"))
}

/// Compose's interpolation with nothing set: `${VAR:-default}` is the
/// default (the example must run with no `.env`), `$$` a literal `$`.
fn interpolate(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(body) = rest.strip_prefix("${") {
            let end = body
                .find('}')
                .unwrap_or_else(|| panic!("unclosed ${{ in {value}"));
            let (_, default) = body[..end].split_once(":-").unwrap_or_else(|| {
                panic!("{value}: give every variable a default (${{VAR:-default}})")
            });
            out.push_str(default);
            rest = &body[end + 1..];
        } else {
            panic!("{value}: a bare $ (write $$ for a literal one)");
        }
    }
    out.push_str(rest);
    out
}

fn service<'a>(file: &'a Compose, name: &str) -> &'a Service {
    file.services
        .get(name)
        .unwrap_or_else(|| panic!("no {name} service"))
}

fn env(service: &Service, name: &str) -> String {
    interpolate(
        service
            .environment
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not set")),
    )
}

#[test]
fn the_services_images_and_dependencies_fit_together() {
    let file = compose();
    for name in ["abstore", "postgres", "minio", "minio-bucket", "proxy"] {
        service(&file, name);
    }
    for (name, service) in &file.services {
        let (_, tag) = service
            .image
            .split_once(':')
            .unwrap_or_else(|| panic!("{name}: pin the image's tag"));
        assert!(
            tag != "latest" && !tag.is_empty(),
            "{name}: pin the image's tag"
        );
        if let Some(restart) = &service.restart {
            assert!(
                ["no", "always", "on-failure", "unless-stopped"].contains(&restart.as_str()),
                "{name}: restart {restart}"
            );
        }
        if let Some(check) = &service.healthcheck {
            assert!(
                matches!(
                    check.test.first().map(String::as_str),
                    Some("CMD" | "CMD-SHELL")
                ),
                "{name}: healthcheck test {:?}",
                check.test
            );
            for duration in [&check.interval, &check.timeout] {
                let seconds = duration.strip_suffix('s').map(str::parse::<u32>);
                assert!(
                    matches!(seconds, Some(Ok(_))),
                    "{name}: duration {duration}"
                );
            }
            assert!(check.retries > 0, "{name}: healthcheck retries");
        }
        for (dependency, on) in &service.depends_on {
            let target = service_of(&file, dependency, name);
            match on.condition.as_str() {
                "service_started" | "service_completed_successfully" => {}
                // Either a healthcheck here or the image's own (abstore's
                // Dockerfile has a HEALTHCHECK).
                "service_healthy" => assert!(
                    target.healthcheck.is_some() || target.build.is_some(),
                    "{name} waits for {dependency} to be healthy, which has no healthcheck"
                ),
                other => panic!("{name}: unknown depends_on condition {other}"),
            }
        }
        for volume in &service.volumes {
            let source = volume.split(':').next().unwrap();
            if source.starts_with("./") {
                assert!(repo(source).exists(), "{name}: {source} does not exist");
            } else {
                assert!(
                    file.volumes.contains_key(source),
                    "{name}: volume {source} is not declared"
                );
            }
        }
        for port in &service.ports {
            let parts: Vec<&str> = port.split(':').collect();
            assert!(
                parts.len() == 2 && parts.iter().all(|p| p.parse::<u16>().is_ok()),
                "{name}: port {port} is not HOST:CONTAINER"
            );
        }
    }
    let abstore = service(&file, "abstore");
    assert_eq!(abstore.build.as_deref(), Some("."));
    assert!(repo("Dockerfile").is_file());
    assert!(
        abstore.ports.is_empty(),
        "abstore's port stays private: clients go through the proxy"
    );
    // Longer than abstore's shutdown grace (10 s), so requests finish.
    let grace: u64 = abstore
        .stop_grace_period
        .as_deref()
        .and_then(|g| g.strip_suffix('s'))
        .and_then(|g| g.parse().ok())
        .expect("abstore: stop_grace_period in seconds");
    assert!(grace > 10, "stop_grace_period {grace}s");
}

fn service_of<'a>(file: &'a Compose, name: &str, from: &str) -> &'a Service {
    file.services
        .get(name)
        .unwrap_or_else(|| panic!("{from} depends on {name}, which is not a service"))
}

/// Every `ABSTORE_*` variable is one `abstore serve` reads, with a value it
/// accepts; the command line parses; `AWS_*` are the S3 client's keys.
#[test]
fn abstore_is_given_only_settings_it_has() {
    let file = compose();
    let abstore = service(&file, "abstore");
    let mut command = abstore::cli::Cli::command();
    command.build();
    let serve = command.find_subcommand("serve").unwrap().clone();
    // The variables as the flags they stand for, parsed by abstore's own
    // command line: a name abstore does not read, or a value it refuses,
    // fails here as it would fail the container's start.
    let mut argv = vec!["abstore".to_owned()];
    argv.extend(abstore.command.clone().expect("abstore: command"));
    assert_eq!(argv[1], "serve");
    for (name, value) in &abstore.environment {
        let value = interpolate(value);
        if let Some(key) = name.strip_prefix("AWS_") {
            key.to_lowercase()
                .parse::<object_store::aws::AmazonS3ConfigKey>()
                .unwrap_or_else(|e| panic!("{name} is no S3 client setting: {e}"));
            continue;
        }
        assert!(name.starts_with("ABSTORE_"), "{name}: not abstore's");
        let arg = serve
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name.as_str()))
            .unwrap_or_else(|| panic!("`abstore serve` reads no {name}"));
        let long = arg.get_long().unwrap();
        if arg.get_action().takes_values() {
            argv.push(format!("--{long}={value}"));
        } else {
            // An on/off setting: the spellings its variable accepts.
            let on = clap::builder::TypedValueParser::parse_ref(
                &clap::builder::BoolishValueParser::new(),
                &serve,
                Some(arg),
                std::ffi::OsStr::new(&value),
            )
            .unwrap_or_else(|e| panic!("{name}={value}: {e}"));
            if on {
                argv.push(format!("--{long}"));
            }
        }
    }
    assert!(argv.len() > 6, "abstore's settings are missing: {argv:?}");
    abstore::cli::Cli::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("abstore's settings {argv:?}: {e}"));
    // The secret file lies on a volume, so it survives a recreated container.
    let secret = env(abstore, "ABSTORE_SECRET_FILE");
    assert!(
        abstore.volumes.iter().any(|v| {
            let target = v.split(':').nth(1).unwrap();
            secret.starts_with(&format!("{target}/"))
        }),
        "{secret} is not on a volume"
    );
}

/// The database URL names the PostgreSQL service and its user, password and
/// database; the bucket is the one the bucket job creates, on the S3 service,
/// with its credentials; the proxy forwards to abstore's port.
#[test]
fn the_urls_and_credentials_agree_across_services() {
    let file = compose();
    let abstore = service(&file, "abstore");
    let postgres = service(&file, "postgres");
    let database = url::Url::parse(&env(abstore, "ABSTORE_DATABASE")).unwrap();
    assert_eq!(database.scheme(), "postgres");
    assert_eq!(database.host_str(), Some("postgres"));
    assert_eq!(database.port(), Some(5432));
    assert_eq!(database.username(), env(postgres, "POSTGRES_USER"));
    assert_eq!(
        database.password(),
        Some(env(postgres, "POSTGRES_PASSWORD").as_str())
    );
    assert_eq!(
        database.path(),
        format!("/{}", env(postgres, "POSTGRES_DB"))
    );

    let minio = service(&file, "minio");
    let bucket = env(abstore, "ABSTORE_BLOBS");
    let bucket = bucket
        .strip_prefix("s3://")
        .expect("ABSTORE_BLOBS: s3://BUCKET");
    assert_eq!(env(abstore, "AWS_ENDPOINT"), "http://minio:9000");
    assert_eq!(
        env(abstore, "AWS_ACCESS_KEY_ID"),
        env(minio, "MINIO_ROOT_USER")
    );
    assert_eq!(
        env(abstore, "AWS_SECRET_ACCESS_KEY"),
        env(minio, "MINIO_ROOT_PASSWORD")
    );
    let job = service(&file, "minio-bucket");
    let script = interpolate(&job.entrypoint.as_ref().expect("the bucket job").join(" "));
    assert!(
        script.contains(&format!("mc mb --ignore-existing store/{bucket}")),
        "{script}"
    );
    assert!(
        script.contains(&format!(
            "http://minio:9000 {}",
            env(minio, "MINIO_ROOT_USER")
        )),
        "{script}"
    );
    assert_eq!(
        env(job, "MINIO_ROOT_PASSWORD"),
        env(minio, "MINIO_ROOT_PASSWORD")
    );

    let listen: std::net::SocketAddr = env(abstore, "ABSTORE_LISTEN").parse().unwrap();
    let caddyfile = std::fs::read_to_string(repo("deploy/Caddyfile")).unwrap();
    assert!(
        caddyfile.contains(&format!("reverse_proxy abstore:{}", listen.port())),
        "{caddyfile}"
    );
    let proxy = service(&file, "proxy");
    assert!(
        proxy.ports.iter().any(|p| p == "443:443"),
        "{:?}",
        proxy.ports
    );
    assert!(
        proxy
            .volumes
            .iter()
            .any(|v| v.starts_with("./deploy/Caddyfile:/etc/caddy/Caddyfile")),
        "{:?}",
        proxy.volumes
    );
}
