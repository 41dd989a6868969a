# syntax=docker/dockerfile:1
# abstore: multi-stage build. cargo-chef caches the dependency layer, the
# runtime is distroless (glibc + CA certificates, no shell) as a non-root user
# (uid 65532, which must own the /data volume). .dockerignore keeps docs,
# benches and tests out of the build context.
# SQLite is bundled and TLS is rustls, so the runtime needs no extra libraries.

FROM rust:1.95-trixie AS chef
RUN cargo install cargo-chef --version 0.1.78 --locked
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
# Before the dependencies are built: it holds jemalloc's build-time options.
COPY .cargo .cargo
RUN cargo chef cook --release --recipe-path recipe.json --bin abstore
COPY . .
RUN cargo build --release --locked --bin abstore \
 && strip target/release/abstore \
 && mkdir -p /data \
 && chown 65532:65532 /data

FROM gcr.io/distroless/cc-debian13:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="abstore" \
      org.opencontainers.image.description="A server for Autobuild's Remote BuildStore protocol (Autobuild 0.8.0, protocol 2)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.source="https://github.com/defrex/autobuild"
COPY --from=builder /src/target/release/abstore /usr/local/bin/abstore
COPY --from=builder --chown=65532:65532 /data /data
# The embedded default, on the /data volume; override any ABSTORE_* variable
# (for example ABSTORE_DATABASE=postgres://… and ABSTORE_BLOBS=s3://…).
# Authenticated by default: the first start writes a random secret to
# /data/secret (mode 0600) and logs the `abstore token mint` command; mount
# your own file at ABSTORE_SECRET_FILE to use it instead. (DL3064 flags the
# variable names: they hold a path and a switch, never the secret itself.)
# hadolint ignore=DL3064
ENV ABSTORE_LISTEN=0.0.0.0:8787 \
    ABSTORE_DATABASE=sqlite:///data/abstore.db \
    ABSTORE_BLOBS=/data/blobs \
    ABSTORE_SECRET_FILE=/data/secret \
    ABSTORE_CREATE_SECRET_FILE=true \
    ABSTORE_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 8787
USER 65532:65532
# SIGTERM starts the graceful shutdown (ABSTORE_SHUTDOWN_GRACE_SECONDS, 10 s by
# default). Dockerfiles cannot set the stop timeout: run with
# `docker stop -t 15` / Compose `stop_grace_period: 15s` / Kubernetes
# `terminationGracePeriodSeconds: 15`, longer than the grace (docs/deployment.md).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/abstore", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/abstore"]
CMD ["serve"]
