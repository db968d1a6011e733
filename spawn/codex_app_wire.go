package spawn

import "encoding/json"

// The app-server messages card sends and reads, as Codex 0.171.0 speaks
// them; fields card does not use are left out and ignored on read.

type (
	codexAppThreadStart struct {
		Cwd               string `json:"cwd"`
		ApprovalPolicy    string `json:"approvalPolicy"`
		ApprovalsReviewer string `json:"approvalsReviewer,omitempty"`
		Sandbox           string `json:"sandbox"`
		Ephemeral         bool   `json:"ephemeral"`
	}
	codexAppThreadResume struct {
		ThreadID          string `json:"threadId"`
		Cwd               string `json:"cwd"`
		ApprovalPolicy    string `json:"approvalPolicy"`
		ApprovalsReviewer string `json:"approvalsReviewer,omitempty"`
		Sandbox           string `json:"sandbox"`
		// ExcludeTurns leaves the thread's past turns out of the answer:
		// card reads only the thread's id and model from it, and without
		// it Codex 0.171.0 warns that full-history hydration is deprecated.
		ExcludeTurns bool `json:"excludeTurns"`
	}
	codexAppThreadResult struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
		Model string `json:"model"`
	}
	codexAppInput struct {
		Type         string `json:"type"`
		Text         string `json:"text,omitempty"`
		TextElements []any  `json:"text_elements,omitempty"`
		URL          string `json:"url,omitempty"`
	}
	codexAppTurnStart struct {
		ThreadID string          `json:"threadId"`
		Input    []codexAppInput `json:"input"`
	}
	codexAppTurn struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  *struct {
			Message           string `json:"message"`
			AdditionalDetails string `json:"additionalDetails"`
		} `json:"error"`
	}
	codexAppItemParams struct {
		Item json.RawMessage `json:"item"`
	}
	// codexAppItem is a ThreadItem: the fields of the kinds card maps.
	codexAppItem struct {
		Type             string          `json:"type"`
		ID               string          `json:"id"`
		Text             string          `json:"text"`
		Command          string          `json:"command"`
		Cwd              string          `json:"cwd"`
		Status           string          `json:"status"`
		AggregatedOutput *string         `json:"aggregatedOutput"`
		ExitCode         *int            `json:"exitCode"`
		Changes          json.RawMessage `json:"changes"`
		Server           string          `json:"server"`
		Tool             string          `json:"tool"`
		Arguments        json.RawMessage `json:"arguments"`
		Result           json.RawMessage `json:"result"`
		Error            *struct {
			Message string `json:"message"`
		} `json:"error"`
		Query string `json:"query"`
	}
	codexAppDelta struct {
		ItemID string `json:"itemId"`
		Delta  string `json:"delta"`
	}
	codexAppCommandApproval struct {
		ItemID         string `json:"itemId"`
		Command        string `json:"command"`
		Cwd            string `json:"cwd"`
		Reason         string `json:"reason"`
		CommandActions []struct {
			Command string `json:"command"`
		} `json:"commandActions"`
	}
	codexAppFileApproval struct {
		ItemID    string `json:"itemId"`
		Reason    string `json:"reason"`
		GrantRoot string `json:"grantRoot"`
	}
	codexAppDecision struct {
		Decision string `json:"decision"`
	}
	codexAppUsage struct {
		TokenUsage struct {
			Total struct {
				InputTokens       int64 `json:"inputTokens"`
				CachedInputTokens int64 `json:"cachedInputTokens"`
				OutputTokens      int64 `json:"outputTokens"`
			} `json:"total"`
		} `json:"tokenUsage"`
	}
	codexAppError struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		WillRetry bool `json:"willRetry"`
	}
	codexAppWarning struct {
		Message string `json:"message"`
		Summary string `json:"summary"`
	}
)
