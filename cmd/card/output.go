package main

import (
	"encoding/json"
	"io"
)

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSON writes v as indented JSON and returns the exit code.
func printJSON(w io.Writer, v any) int {
	if writeJSON(w, v) != nil {
		return exitFailure
	}
	return exitOK
}
