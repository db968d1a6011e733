package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/rpc/rpcclient"
)

// exitInterrupted (EX_TEMPFAIL) is a daemon that stopped, or a connection
// to it that was lost, under a command: retrying may work.
const exitInterrupted = 75

// fail reports err as command cmd's, in the CLI's words, and returns its
// exit code.
func (e env) fail(cmd string, err error) int {
	fmt.Fprintf(e.stderr, "card %s: %s\n", cmd, say(err))
	return exitCode(err)
}

func exitCode(err error) int {
	var nd *client.NoDaemonError
	var re *rpcclient.Error
	switch {
	case errors.As(err, &nd):
		return exitNoDaemon
	case errors.As(err, &re) && re.Code == rpcclient.CodeShuttingDown:
		return exitInterrupted
	case errors.As(err, &re) && re.Code != rpcclient.CodeInternalError:
		return exitRefused
	}
	return exitFailure
}

// flagOf names each request field as the flag of `card invoke` that sets
// it, so a refusal names what the person typed.
var flagOf = map[string]string{
	"cwd":                              "--cwd",
	"permission_mode":                  "--mode",
	"model":                            "--model",
	"invoked_by":                       "--invoked-by",
	"timeout_secs":                     "--timeout",
	"acknowledge_unenforced_read_only": "--acknowledge-unenforced-read-only",
}

// wireWord matches a request field's name as a whole word, and a
// `field = true` that tells a wire client to set a flag.
// (cwd is left alone: "under its cwd" is English too.)
var wireWord = regexp.MustCompile(`\b(permission_mode|invoked_by|timeout_secs|acknowledge_unenforced_read_only)( = true)?\b`)

// say is err as the CLI tells it: the daemon's message without its wire
// code or "invalid params", the request's fields named by their flags, and
// the methods a wire client would call named as card's commands.
func say(err error) string {
	var re *rpcclient.Error
	if !errors.As(err, &re) {
		return err.Error()
	}
	data := errData(re)
	switch re.Code {
	case daemon.CodeRunNotFound:
		if id, ok := data["run_id"].(string); ok {
			return fmt.Sprintf("no run %q; `card runs` lists the recorded runs", id)
		}
	case rpcclient.CodeInvalidParams:
		msg := strings.TrimPrefix(re.Message, "invalid params: ")
		field, _ := data["field"].(string)
		switch {
		case field == "id":
			// "id: unknown agent …": the agent is the first argument.
			return strings.TrimPrefix(msg, "id: ")
		case field == "task" && strings.Contains(msg, "must not be empty"):
			return "the task is empty: give it as an argument, or on stdin with -"
		case field == "task":
			return "the task: " + strings.TrimPrefix(msg, "task: ")
		case flagOf[field] != "" && strings.HasPrefix(msg, field+": "):
			msg = flagOf[field] + ": " + strings.TrimPrefix(msg, field+": ")
		}
		return wireToFlags(msg)
	}
	return wireToFlags(re.Message)
}

// errData is an error's data object, as the daemon sent it (raw JSON) or
// as a handler built it (in-process).
func errData(re *rpcclient.Error) map[string]any {
	switch d := re.Data.(type) {
	case map[string]any:
		return d
	case json.RawMessage:
		var m map[string]any
		_ = json.Unmarshal(d, &m)
		return m
	}
	return nil
}

func wireToFlags(msg string) string {
	return wireWord.ReplaceAllStringFunc(msg, func(w string) string {
		return flagOf[strings.TrimSuffix(w, " = true")]
	})
}
