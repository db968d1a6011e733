package detect

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
)

// credFileLimit: credential and settings files are small; anything larger is
// not the file we expect and is not read.
const credFileLimit = 1 << 20

// readJSONShape reads a JSON object's top-level keys with their raw values
// left unparsed. Heuristics only test presence (rawPresent) and, for a few
// non-secret fields such as a mode name, read that one field; a credential
// value is never decoded into a string that could be returned or logged.
func readJSONShape(path string) (keys map[string]json.RawMessage, exists bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	if fi.Size() > credFileLimit {
		return nil, true, errors.New("file too large to be a credential file")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, true, err
	}
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, true, err
	}
	return keys, true, nil
}

// rawPresent: the key exists with a value that is not null, "" or {}.
func rawPresent(keys map[string]json.RawMessage, k string) bool {
	v, ok := keys[k]
	if !ok {
		return false
	}
	v = bytes.TrimSpace(v)
	switch string(v) {
	case "", "null", `""`, "{}", "[]":
		return false
	}
	return true
}

// rawString decodes a non-secret string field (a mode or type name).
func rawString(keys map[string]json.RawMessage, k string) string {
	var s string
	if v, ok := keys[k]; ok {
		_ = json.Unmarshal(v, &s)
	}
	return s
}
