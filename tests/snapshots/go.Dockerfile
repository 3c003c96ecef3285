# Injected by Preview Orchestrator (framework: go) because the repository has no Dockerfile.
FROM golang:1.22-bookworm AS build
WORKDIR /src
COPY go.mod go.sum* ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /out/server .

FROM debian:bookworm-slim
WORKDIR /app
COPY --from=build /out/server /app/server
USER 10001:10001
EXPOSE 8080
CMD ["/bin/sh", "-c", "exec /app/server"]
