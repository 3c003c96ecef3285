// The notes service: GET /, /health, and /notes (POST a JSON {"text": …}, GET the list).
package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"example.com/notes/internal/notes"
)

//go:embed message.txt
var message string

func main() {
	store, err := notes.Open(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	for attempt := 0; ; attempt++ {
		if err = store.Migrate(); err == nil || attempt == 30 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "go-service says: %s\n", strings.TrimSpace(message))
	})
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	http.HandleFunc("/notes", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var note struct{ Text string }
			if err := json.NewDecoder(r.Body).Decode(&note); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if err := store.Add(note.Text); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		all, err := store.All()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(all)
	})
	log.Fatal(http.ListenAndServe(":"+os.Getenv("PORT"), nil))
}
