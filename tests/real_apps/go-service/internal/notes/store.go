// Package notes keeps notes in PostgreSQL.
package notes

import (
	"database/sql"
	"strings"

	_ "github.com/lib/pq" // the PostgreSQL driver, from vendor/
)

// Store is a table of notes.
type Store struct{ db *sql.DB }

// Open connects with a DATABASE_URL; the preview's database speaks no TLS.
func Open(url string) (*Store, error) {
	if !strings.Contains(url, "sslmode=") {
		separator := "?"
		if strings.Contains(url, "?") {
			separator = "&"
		}
		url += separator + "sslmode=disable"
	}
	db, err := sql.Open("postgres", url)
	if err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// Migrate creates the table if it is missing.
func (s *Store) Migrate() error {
	_, err := s.db.Exec(`CREATE TABLE IF NOT EXISTS notes (id SERIAL PRIMARY KEY, text TEXT NOT NULL)`)
	return err
}

// Add stores a note.
func (s *Store) Add(text string) error {
	_, err := s.db.Exec(`INSERT INTO notes (text) VALUES ($1)`, text)
	return err
}

// All lists the notes, oldest first.
func (s *Store) All() ([]string, error) {
	rows, err := s.db.Query(`SELECT text FROM notes ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	texts := []string{}
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			return nil, err
		}
		texts = append(texts, text)
	}
	return texts, rows.Err()
}
