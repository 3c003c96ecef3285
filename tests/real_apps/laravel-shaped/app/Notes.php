<?php

namespace App;

use PDO;

final class Notes
{
    private PDO $db;

    public function __construct()
    {
        $driver = getenv('DB_CONNECTION') === 'pgsql' ? 'pgsql' : 'mysql';
        $dsn = sprintf('%s:host=%s;port=%s;dbname=%s', $driver, getenv('DB_HOST'), getenv('DB_PORT'),
            getenv('DB_DATABASE'));
        $this->db = new PDO($dsn, getenv('DB_USERNAME'), getenv('DB_PASSWORD'),
            [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
    }

    public function migrate(): void
    {
        $id = getenv('DB_CONNECTION') === 'pgsql' ? 'SERIAL PRIMARY KEY' : 'INTEGER AUTO_INCREMENT PRIMARY KEY';
        $this->db->exec("CREATE TABLE IF NOT EXISTS notes (id $id, text TEXT NOT NULL)");
    }

    public function add(string $text): void
    {
        $this->db->prepare('INSERT INTO notes (text) VALUES (?)')->execute([$text]);
    }

    /** @return list<string> */
    public function all(): array
    {
        return $this->db->query('SELECT text FROM notes ORDER BY id')->fetchAll(PDO::FETCH_COLUMN);
    }
}
