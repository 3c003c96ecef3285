// A second command, as real modules have: the preview must build cmd/server, not this one.
package main

import "fmt"

func main() { fmt.Println("seed: nothing to do") }
