# Injected by Preview Orchestrator (framework: rust) because the repository has no Dockerfile.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# No binary found in Cargo.toml: every release binary is kept.
RUN cargo build --release \
    && mkdir -p /out && find target/release -maxdepth 1 -type f -perm -u+x -exec cp {} /out/ \;

FROM debian:bookworm-slim
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ /app/
WORKDIR /app
USER 10001:10001
EXPOSE 8080
CMD ["/bin/sh", "-c", "exec /app/server"]
