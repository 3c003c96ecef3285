<?php
require __DIR__ . '/../bootstrap/app.php';

$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
// Like Laravel's log: storage/ must be writable by the user the app runs as.
file_put_contents(__DIR__ . '/../storage/logs/laravel.log', date(DATE_ATOM) . " {$_SERVER['REQUEST_METHOD']} $path\n",
    FILE_APPEND);
header('Content-Type: text/plain');
if ($path === '/health') {
    echo 'ok';
} elseif ($path === '/') {
    echo 'laravel-shaped says: ' . trim(file_get_contents(__DIR__ . '/../message.txt')) . "\n";
} elseif ($path === '/notes') {
    $notes = new App\Notes();
    if ($_SERVER['REQUEST_METHOD'] === 'POST') {
        $notes->add(json_decode(file_get_contents('php://input'), true)['text']);
    }
    header('Content-Type: application/json');
    echo json_encode($notes->all());
} else {
    http_response_code(404);
    echo 'not found';
}
