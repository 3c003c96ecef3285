# Injected by Preview Orchestrator (framework: laravel) because the repository has no Dockerfile.
FROM composer:2 AS vendor
WORKDIR /app
COPY composer.json composer.lock* ./
# The runtime stage has the PHP extensions; the composer image need not.
RUN composer install --no-dev --no-interaction --no-scripts --no-autoloader --prefer-dist --ignore-platform-reqs
COPY . .
RUN composer dump-autoload --no-dev --optimize

FROM php:8.3-cli
RUN apt-get update && apt-get install -y --no-install-recommends libpq-dev \
    && docker-php-ext-install pdo_pgsql && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=vendor --chown=www-data:www-data /app /app
RUN mkdir -p storage/framework/cache storage/framework/sessions storage/framework/views storage/logs \
        bootstrap/cache \
    && chown -R www-data:www-data storage bootstrap/cache
USER www-data
EXPOSE 8000
CMD ["/bin/sh", "-c", "exec php artisan serve --host=0.0.0.0 --port=\"${PORT}\""]
