# Injected by Preview Orchestrator (framework: nestjs) because the repository has no Dockerfile.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json ./
RUN npm install
COPY . .
RUN npm prune --omit=dev

FROM node:20-bookworm-slim
RUN install -d -o node -g node /app
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build --chown=node:node /app /app
USER node
EXPOSE 3000
CMD ["/bin/sh", "-c", "exec node dist/main.js"]
