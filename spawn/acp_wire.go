package spawn

import "encoding/json"

// The ACP messages card sends and reads, as Gemini CLI and Copilot CLI
// speak them; fields card does not use are left out and ignored on read.

type (
	acpInitializeParams struct {
		ProtocolVersion    int           `json:"protocolVersion"`
		ClientCapabilities acpClientCaps `json:"clientCapabilities"`
	}
	acpClientCaps struct {
		FS       acpFSCaps `json:"fs"`
		Terminal bool      `json:"terminal"`
	}
	acpFSCaps struct {
		ReadTextFile  bool `json:"readTextFile"`
		WriteTextFile bool `json:"writeTextFile"`
	}
	acpInitializeResult struct {
		ProtocolVersion   int `json:"protocolVersion"`
		AgentCapabilities struct {
			PromptCapabilities struct {
				Image bool `json:"image"`
			} `json:"promptCapabilities"`
		} `json:"agentCapabilities"`
	}
	acpNewSessionParams struct {
		Cwd        string `json:"cwd"`
		MCPServers []any  `json:"mcpServers"`
	}
	acpNewSessionResult struct {
		SessionID string `json:"sessionId"`
		Models    *struct {
			CurrentModelID string `json:"currentModelId"`
		} `json:"models"`
	}
	acpPromptParams struct {
		SessionID string       `json:"sessionId"`
		Prompt    []acpContent `json:"prompt"`
	}
	// acpContent is a content block: text, or an image whose Data
	// encoding/json writes as the standard base64 ACP expects.
	acpContent struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		MimeType string `json:"mimeType,omitempty"`
		Data     []byte `json:"data,omitempty"`
	}
	acpPromptResult struct {
		StopReason string `json:"stopReason"`
		Usage      *struct {
			InputTokens      int64 `json:"inputTokens"`
			OutputTokens     int64 `json:"outputTokens"`
			CachedReadTokens int64 `json:"cachedReadTokens"`
		} `json:"usage"`
		// Gemini reports tokens in its own _meta.
		Meta *struct {
			Quota *struct {
				TokenCount *struct {
					InputTokens  int64 `json:"input_tokens"`
					OutputTokens int64 `json:"output_tokens"`
				} `json:"token_count"`
			} `json:"quota"`
		} `json:"_meta"`
	}
	acpUpdateParams struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}
	// acpUpdate is a session/update's update. Content is one content
	// block in a message chunk and a list in a tool call.
	acpUpdate struct {
		SessionUpdate string `json:"sessionUpdate"`
		acpToolCall
	}
	// acpToolCall is a tool call or an update of one; every field but
	// the id is optional in an update.
	acpToolCall struct {
		ToolCallID string          `json:"toolCallId"`
		Title      string          `json:"title"`
		Kind       string          `json:"kind"`
		Status     string          `json:"status"`
		RawInput   json.RawMessage `json:"rawInput"`
		RawOutput  json.RawMessage `json:"rawOutput"`
		Content    json.RawMessage `json:"content"`
		Locations  json.RawMessage `json:"locations"`
	}
	acpPermissionParams struct {
		SessionID string                `json:"sessionId"`
		ToolCall  acpToolCall           `json:"toolCall"`
		Options   []acpPermissionOption `json:"options"`
	}
	acpPermissionOption struct {
		OptionID string `json:"optionId"`
		Name     string `json:"name"`
		Kind     string `json:"kind"`
	}
	acpPermissionResult struct {
		Outcome acpOutcome `json:"outcome"`
	}
	acpOutcome struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId,omitempty"`
	}
)
