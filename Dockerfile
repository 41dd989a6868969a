# syntax=docker/dockerfile:1
# abstore: multi-stage build. cargo-chef caches the dependency layer, the
# runtime is distroless (glibc + CA certificates, no shell) as a non-root user.
# SQLite is bundled and TLS is rustls, so the runtime needs no extra libraries.

FROM rust:1.95-trixie AS chef
RUN cargo install cargo-chef --version 0.1.78 --locked
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --recipe-path recipe.json --bin abstore
COPY . .
RUN cargo build --release --locked --bin abstore \
 && mkdir -p /data \
 && chown 65532:65532 /data

FROM gcr.io/distroless/cc-debian13:nonroot
COPY --from=builder /src/target/release/abstore /usr/local/bin/abstore
COPY --from=builder --chown=65532:65532 /data /data
# The embedded default, on the /data volume; override any ABSTORE_* variable
# (for example ABSTORE_DATABASE=postgres://… and ABSTORE_BLOBS=s3://…).
# Authenticated by default: the first start writes a random secret to
# /data/secret (mode 0600) and logs the `abstore token mint` command; mount
# your own file at ABSTORE_SECRET_FILE to use it instead.
ENV ABSTORE_LISTEN=0.0.0.0:8787 \
    ABSTORE_DATABASE=sqlite:///data/abstore.db \
    ABSTORE_BLOBS=/data/blobs \
    ABSTORE_SECRET_FILE=/data/secret \
    ABSTORE_CREATE_SECRET_FILE=true \
    ABSTORE_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 8787
USER 65532:65532
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/abstore", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/abstore"]
CMD ["serve"]
