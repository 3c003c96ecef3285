# Injected by Preview Orchestrator (framework: go) because the repository has no Dockerfile.
FROM golang:1.22-bookworm AS build
WORKDIR /src
# GOCACHE explicit: the cache mount below is there, whatever HOME the toolchain image has.
ENV CGO_ENABLED=0 GOCACHE=/root/.cache/go-build
COPY go.mod go.sum* ./
RUN go mod download
COPY . .
RUN --mount=type=cache,id=po-cache-d0c4471cfd56872b52fb40e88961acb7,target=/root/.cache/go-build go build -buildvcs=false -trimpath -ldflags="-s -w" -o /out/server .

FROM debian:bookworm-slim
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/server /app/server
WORKDIR /app
USER 10001:10001
EXPOSE 8080
CMD ["/bin/sh", "-c", "exec /app/server"]
