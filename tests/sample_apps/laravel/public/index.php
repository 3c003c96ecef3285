<?php
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
if ($path === '/health') {
    echo 'ok';
    return;
}
if ($path === '/db') {
    $socket = @fsockopen(getenv('DB_HOST'), (int) getenv('DB_PORT'), $errno, $error, 3);
    if (!$socket) {
        http_response_code(502);
        echo $error;
        return;
    }
    fclose($socket);
    echo 'db reachable';
    return;
}
echo 'laravel says: ' . trim(file_get_contents(__DIR__ . '/../message.txt')) . "\n";
