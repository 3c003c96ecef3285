<?php
// What Laravel's bootstrap insists on: the composer autoloader, an APP_KEY of 32 bytes, a writable cache.
require __DIR__ . '/../vendor/autoload.php';

$key = getenv('APP_KEY') ?: '';
if (!str_starts_with($key, 'base64:') || strlen(base64_decode(substr($key, 7), true) ?: '') !== 32) {
    http_response_code(500);
    echo "No application encryption key has been specified.\n";
    exit(1);
}
file_put_contents(__DIR__ . '/cache/config.php', '<?php return ' . var_export(['booted' => date(DATE_ATOM)], true) . ';');
