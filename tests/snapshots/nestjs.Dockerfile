# Injected by Preview Orchestrator (framework: nestjs) because the repository has no Dockerfile.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json* ./
RUN npm ci
COPY . .
RUN npm run build --if-present && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build --chown=10001:10001 /app /app
USER 10001:10001
EXPOSE 3000
CMD ["/bin/sh", "-c", "exec node dist/main.js"]
