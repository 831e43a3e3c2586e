# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run as a non-root user in a slim image.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p control-plane -p cpctl \
 && cp target/release/control-plane target/release/cpctl /usr/local/bin/

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin controlplane \
 && mkdir /data && chown 10001:10001 /data
COPY --from=build /usr/local/bin/control-plane /usr/local/bin/cpctl /usr/local/bin/
USER 10001:10001
# Without DATABASE_URL the embedded default keeps its SQLite file in /data (mount a volume).
ENV CP_LISTEN=0.0.0.0:8080 \
    CP_LOG_FORMAT=json \
    CP_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/control-plane"]
