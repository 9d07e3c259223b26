// Command protogen writes the protobuf schema table of the simulated API server
// (crates/sim-apiserver/src/protobuf_schema.rs) from the Go types of every built-in kind, and the
// differential fixtures its decoder is tested against (crates/sim-apiserver/tests/protobuf).
//
// The kinds are those the schemes of the generally available API groups and
// apiextensions.k8s.io/v1 register (with PartialObjectMetadata and aggregated discovery's
// documents). Each Go struct becomes a message, its fields in declaration order (the order
// encoding/json writes them in, which the server's answers follow): the field numbers come from
// the `protobuf` struct tags, the JSON names and presence (omitempty, pointer, repeated, map,
// inline, and whether encoding/json writes the field even when unset) from the `json` tags and
// the Go types. Before writing, every message is checked against
// the Go types' own protobuf marshalling: a value with every field set must be written with
// exactly the table's field numbers and wire types.
//
//	cd crates/sim-apiserver/protogen && go run . > ../src/protobuf_schema.rs
//	cd crates/sim-apiserver/protogen && go run . fixtures ../tests/protobuf
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 1:
		err = writeSchema(os.Stdout)
	case len(os.Args) == 3 && os.Args[1] == "fixtures":
		err = writeFixtures(os.Args[2])
	default:
		err = errors.New("usage: protogen > ../src/protobuf_schema.rs | protogen fixtures DIR")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}
