# Injected by Preview Orchestrator (framework: rust) because the repository has no Dockerfile.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked || cargo build --release
RUN mkdir -p /out && find target/release -maxdepth 1 -type f -perm -u+x -exec cp {} /out/ \;

FROM debian:bookworm-slim
WORKDIR /app
COPY --from=build /out/ /app/
USER 10001:10001
EXPOSE 8080
CMD ["/bin/sh", "-c", "exec /app/server"]
