#!/bin/sh
# A stand-in for Claude Code for the protocol examples and the Node client
# test: the real CLI's --version and `auth status` answers, and a short
# stream-json run. A task containing SLOW sleeps before answering, so a
# client has something to cancel; one containing TOOL reads a file first;
# one that starts "WRITE name text" writes text to name in its cwd, as its
# Write tool would.
case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0 ;;
auth) printf '{"loggedIn": true, "authMethod": "api_key", "apiProvider": "firstParty", "apiKeySource": "ANTHROPIC_API_KEY"}\n'; exit 0 ;;
esac
task=$(cat)
echo '{"type":"system","subtype":"init","cwd":"'"$PWD"'","session_id":"942c07c4-8230-4293-9685-338fbcab211c","tools":["Bash","Edit","Read"],"model":"claude-opus-4-8","permissionMode":"default"}'
case "$task" in
*SLOW*) sleep 30 ;;
WRITE\ *) rest=${task#WRITE }; name=${rest%% *}; mkdir -p "$(dirname "$name")"; printf '%s\n' "${rest#* }" > "$name"
  echo '{"type":"assistant","message":{"id":"msg_fake_write","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"tool_use","id":"toolu_fake_2","name":"Write","input":{"file_path":"'"$PWD/$name"'"}}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"942c07c4-8230-4293-9685-338fbcab211c"}' ;;
*TOOL*) echo '{"type":"assistant","message":{"id":"msg_fake_tool","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"tool_use","id":"toolu_fake_1","name":"Read","input":{"file_path":"README.md"}}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"942c07c4-8230-4293-9685-338fbcab211c"}' ;;
esac
echo '{"type":"assistant","message":{"id":"msg_fake","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"PONG from fake anthropic"}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"942c07c4-8230-4293-9685-338fbcab211c"}'
echo '{"type":"result","subtype":"success","is_error":false,"duration_ms":195,"num_turns":1,"result":"PONG from fake anthropic","stop_reason":"end_turn","session_id":"942c07c4-8230-4293-9685-338fbcab211c","total_cost_usd":0.00003,"usage":{"input_tokens":10,"output_tokens":1}}'
