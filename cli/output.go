package cli

import (
	"encoding/json"
	"io"
)

// writeJSON writes v as one indented JSON document: every command's --json
// output.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
