package standin

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// Image is an image one model call carried, as the vendor's API received
// it: proof that an attachment reached the model and not just the CLI.
type Image struct {
	// Call is the index of the model call (in ModelCalls) that carried it.
	Call int
	// Form is how the request carried it: "anthropic_image" (a Messages
	// image block), "input_image" (OpenAI Responses), "image_url" (Chat
	// Completions) or "inline_data" (Gemini).
	Form string
	MIME string
	Data []byte
}

// Images returns every image in the model calls' request bodies, in the
// order the calls arrived and, within a call, the order of the body. A
// CLI that repeats the conversation in a later call (after a tool call, or
// in a side call) shows the image once per call.
func (s *Server) Images() []Image {
	var out []Image
	for i, r := range s.ModelCalls() {
		var body any
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		walkImages(body, func(form, mime string, data []byte) {
			out = append(out, Image{Call: i, Form: form, MIME: mime, Data: data})
		})
	}
	return out
}

// TextContains reports whether any model call's body holds s as text (in
// any string of the body, decoded), for what a CLI says in place of an
// image it would not send.
func (s *Server) TextContains(sub string) bool {
	for _, r := range s.ModelCalls() {
		var body any
		if json.Unmarshal(r.Body, &body) == nil && stringContains(body, sub) {
			return true
		}
	}
	return false
}

func stringContains(v any, sub string) bool {
	switch x := v.(type) {
	case string:
		return strings.Contains(x, sub)
	case map[string]any:
		for _, e := range x {
			if stringContains(e, sub) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if stringContains(e, sub) {
				return true
			}
		}
	}
	return false
}

// walkImages finds the image parts of each dialect served here, anywhere in
// a decoded request body.
func walkImages(v any, found func(form, mime string, data []byte)) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			walkImages(e, found)
		}
	case map[string]any:
		switch x["type"] {
		case "image":
			// Anthropic: {"type":"image","source":{"type":"base64","media_type":…,"data":…}}
			if src, ok := x["source"].(map[string]any); ok && src["type"] == "base64" {
				mime, _ := src["media_type"].(string)
				if data, ok := decodeB64(src["data"]); ok {
					found("anthropic_image", mime, data)
				}
				return
			}
		case "input_image":
			// Responses: {"type":"input_image","image_url":"data:…;base64,…"}
			if url, ok := x["image_url"].(string); ok {
				if mime, data, ok := decodeDataURL(url); ok {
					found("input_image", mime, data)
				}
				return
			}
		case "image_url":
			// Chat Completions: {"type":"image_url","image_url":{"url":"data:…"}}
			if iu, ok := x["image_url"].(map[string]any); ok {
				url, _ := iu["url"].(string)
				if mime, data, ok := decodeDataURL(url); ok {
					found("image_url", mime, data)
				}
				return
			}
		}
		for _, key := range []string{"inlineData", "inline_data"} {
			// Gemini: {"inlineData":{"mimeType":…,"data":…}} (camelCase on the wire)
			if in, ok := x[key].(map[string]any); ok {
				mime, _ := in["mimeType"].(string)
				if mime == "" {
					mime, _ = in["mime_type"].(string)
				}
				if data, ok := decodeB64(in["data"]); ok {
					found("inline_data", mime, data)
				}
			}
		}
		for _, e := range x {
			walkImages(e, found)
		}
	}
}

func decodeB64(v any) ([]byte, bool) {
	s, ok := v.(string)
	if !ok {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(s)
	return b, err == nil
}

func decodeDataURL(url string) (mime string, data []byte, ok bool) {
	rest, found := strings.CutPrefix(url, "data:")
	if !found {
		return "", nil, false
	}
	meta, payload, found := strings.Cut(rest, ",")
	if !found || !strings.HasSuffix(meta, ";base64") {
		return "", nil, false
	}
	data, ok = decodeB64(payload)
	return strings.TrimSuffix(meta, ";base64"), data, ok
}
