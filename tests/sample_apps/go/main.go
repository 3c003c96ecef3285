// A Go sample app for preview tests: stdlib only, builds offline.
package main

import (
	_ "embed"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

//go:embed message.txt
var message string

func main() {
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	http.HandleFunc("/db", func(w http.ResponseWriter, r *http.Request) {
		conn, err := net.Dial("tcp", net.JoinHostPort(os.Getenv("DB_HOST"), os.Getenv("DB_PORT")))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn.Close()
		fmt.Fprint(w, "db reachable")
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "go says: %s\n", strings.TrimSpace(message))
	})
	if err := http.ListenAndServe(":"+os.Getenv("PORT"), nil); err != nil {
		panic(err)
	}
}
