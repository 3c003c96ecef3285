# Injected by Preview Orchestrator (framework: laravel) because the repository has no Dockerfile.
FROM composer:2 AS vendor
WORKDIR /app
COPY composer.json composer.lock* ./
RUN composer install --no-dev --no-interaction --no-scripts --no-autoloader --prefer-dist
COPY . .
RUN composer dump-autoload --optimize --no-dev

FROM php:8.3-cli
WORKDIR /app
COPY --from=vendor --chown=10001:10001 /app /app
USER 10001:10001
EXPOSE 8000
CMD ["/bin/sh", "-c", "exec php artisan serve --host=0.0.0.0 --port=\"${PORT}\""]
