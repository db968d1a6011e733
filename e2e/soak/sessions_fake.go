package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// sessionsFakeScript is a fake Claude Code for the sessions phase, a shell
// script as plain as a CLI's launcher. It speaks both forms card uses: a
// one-shot turn (the prompt as text on stdin, then EOF), and a warm agent
// (`--input-format stream-json`: the initialize control request, then one
// {"type":"user"} line per turn, until stdin closes). It answers each turn
// with an init line, the prompt echoed back and a result, under the
// session id card passed (--session-id or --resume) or one of its own.
//
// A prompt ending in "T<n>" takes n tenths of a second. A warm turn keeps
// reading stdin while it waits, so an interrupt control request ends it at
// once, as the real CLI's does (a fake that only noticed it after its
// sleep would make every cancel wait out card's kill grace); stdin closed
// mid-turn does not end the turn early, it runs its time as a CLI would. Every prompt
// it reads is appended to prompts.log beside it, one line each: W or C
// (warm or cold), its pid, the prompt.
const sessionsFakeScript = `#!/bin/bash
warm=0 sid= prev=
for a in "$@"; do
  case "$a" in --version|-v) echo "2.1.197 (Claude Code)"; exit 0;; esac
  case "$prev" in
  --session-id|--resume) sid=$a;;
  --input-format) [ "$a" = stream-json ] && warm=1;;
  esac
  prev=$a
done
case "$1" in auth|login|doctor|update) exit 1;; esac
[ -n "$sid" ] || sid=$(cat /proc/sys/kernel/random/uuid)
log="$(dirname "$0")/prompts.log"
n=0
emit() { printf '%s\n' "$1"; }
tenths() { local t=${1##* T}; t=${t%% *}; case "$t" in ''|*[!0-9]*) t=0;; esac; echo "$t"; }
hello() { emit '{"type":"system","subtype":"init","cwd":"'"$PWD"'","session_id":"'$sid'","model":"claude-fake","tools":["Read"],"slash_commands":[]}'; }
rid() { local r=${1#*\"request_id\":\"}; echo "${r%%\"*}"; }
answer() {
  n=$((n+1))
  if [ "$2" = interrupted ]; then
    emit '{"type":"result","subtype":"error_during_execution","is_error":true,"result":"","session_id":"'$sid'","num_turns":1,"total_cost_usd":0,"usage":{"input_tokens":1,"output_tokens":0}}'
    return
  fi
  emit '{"type":"assistant","session_id":"'$sid'","message":{"id":"m'$n'","type":"message","role":"assistant","model":"claude-fake","content":[{"type":"text","text":"You said: '"$1"'"}]}}'
  emit '{"type":"result","subtype":"success","is_error":false,"result":"You said: '"$1"'","session_id":"'$sid'","num_turns":1,"total_cost_usd":0,"usage":{"input_tokens":3,"output_tokens":2}}'
}
if [ $warm = 0 ]; then
  text=$(cat)
  printf 'C %s %s\n' $$ "$text" >> "$log"
  hello
  t=$(tenths "$text")
  [ "$t" -gt 0 ] && sleep "$((t/10)).$((t%10))"
  answer "$text" ok
  exit 0
fi
while IFS= read -r line; do
  case "$line" in
  *'"subtype":"initialize"'*)
    emit '{"type":"control_response","response":{"subtype":"success","request_id":"'"$(rid "$line")"'","response":{"commands":[]}}}';;
  *'"subtype":"interrupt"'*)
    emit '{"type":"control_response","response":{"subtype":"success","request_id":"'"$(rid "$line")"'"}}';;
  *'"type":"user"'*)
    text=${line##*\"text\":\"}; text=${text%%\"*}
    printf 'W %s %s\n' $$ "$text" >> "$log"
    hello
    t=$(tenths "$text") status=ok
    while [ "$t" -gt 0 ]; do
      IFS= read -r -t 0.1 in; rc=$?
      if [ $rc = 0 ]; then
        case "$in" in *'"subtype":"interrupt"'*)
          emit '{"type":"control_response","response":{"subtype":"success","request_id":"'"$(rid "$in")"'"}}'
          status=interrupted; break;;
        esac
      elif [ $rc -le 128 ]; then
        sleep "$((t/10)).$((t%10))"; break
      fi
      t=$((t-1))
    done
    answer "$text" $status;;
  esac
done
`

// sessionsFakeSetup writes the fake into its own directory (its
// prompts.log goes beside it) and returns its path and the daemon env that
// pins Claude Code to it.
func sessionsFakeSetup(h *harness) (string, []string, error) {
	dir := filepath.Join(h.tmp, "sessions-agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "claude")
	if err := os.WriteFile(bin, []byte(sessionsFakeScript), 0o755); err != nil {
		return "", nil, err
	}
	return bin, []string{"CAR_CLAUDE_CODE_BIN=" + bin}, nil
}

// promptRead is one line of the fake's prompts.log.
type promptRead struct {
	warm bool
	pid  string
	text string
}

// promptsRead is what the fakes beside bin read, in the order they read it.
func promptsRead(bin string) ([]promptRead, error) {
	f, err := os.Open(filepath.Join(filepath.Dir(bin), "prompts.log"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []promptRead
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		pid, text, _ := strings.Cut(rest, " ")
		out = append(out, promptRead{warm: kind == "W", pid: pid, text: text})
	}
	return out, sc.Err()
}
