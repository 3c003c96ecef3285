# Injected by Preview Orchestrator (framework: nestjs) because the repository has no Dockerfile.
FROM node:20-bookworm-slim AS dependencies
WORKDIR /app
COPY package.json ./
RUN npm install

# The production dependencies in a stage of their own, keyed by the manifests alone: a pull request that
# changes only code neither prunes nor copies them again.
FROM dependencies AS production-dependencies
RUN npm prune --omit=dev \
    && mkdir -p node_modules

FROM dependencies AS build
COPY . .
RUN mkdir /out \
    && find . -mindepth 1 -maxdepth 1 ! -name node_modules -exec cp -a -t /out {} +

FROM node:20-bookworm-slim
RUN install -d -o node -g node /app
WORKDIR /app
ENV NODE_ENV=production
COPY --from=production-dependencies --chown=node:node /app/node_modules /app/node_modules
COPY --from=build --chown=node:node /out/ /app/
USER node
EXPOSE 3000
CMD ["/bin/sh", "-c", "exec node dist/main.js"]
