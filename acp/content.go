package acp

import (
	"encoding/base64"
	"encoding/json"
)

// The content block types. Text and resource links every agent takes;
// image, audio and embedded resources only an agent that declared them in
// its prompt capabilities.
const (
	ContentText         = "text"
	ContentImage        = "image"
	ContentAudio        = "audio"
	ContentResourceLink = "resource_link"
	ContentResource     = "resource"
)

// ContentBlock is one piece of a prompt or a message: its Type picks which
// fields it has. Text has Text; image and audio have Data (standard base64)
// and MimeType, an image optionally a URI; a resource link has URI and
// Name; an embedded resource has Resource.
//
// One struct for every type, instead of one per type, reads any block in
// one decode and lets a reader look at Type first; MarshalJSON writes
// only the fields the type has, with the ones the schema requires even
// when they are empty.
type ContentBlock struct {
	Type        string            `json:"type"`
	Text        string            `json:"text,omitempty"`
	Data        string            `json:"data,omitempty"`
	MimeType    string            `json:"mimeType,omitempty"`
	URI         string            `json:"uri,omitempty"`
	Name        string            `json:"name,omitempty"`
	Title       *string           `json:"title,omitempty"`
	Description *string           `json:"description,omitempty"`
	Size        *int64            `json:"size,omitempty"`
	Resource    *ResourceContents `json:"resource,omitempty"`
	Annotations *Annotations      `json:"annotations,omitempty"`
	Meta        Meta              `json:"_meta,omitempty"`
}

// TextBlock is a text content block.
func TextBlock(text string) ContentBlock { return ContentBlock{Type: ContentText, Text: text} }

// ImageBlock is an image content block of data, base64-encoded as the
// protocol carries it.
func ImageBlock(mimeType string, data []byte) ContentBlock {
	return ContentBlock{Type: ContentImage, MimeType: mimeType, Data: base64.StdEncoding.EncodeToString(data)}
}

// MarshalJSON writes the fields of the block's type.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	type common struct {
		Type        string       `json:"type"`
		Annotations *Annotations `json:"annotations,omitempty"`
		Meta        Meta         `json:"_meta,omitempty"`
	}
	c := common{b.Type, b.Annotations, b.Meta}
	switch b.Type {
	case ContentText:
		return json.Marshal(struct {
			common
			Text string `json:"text"`
		}{c, b.Text})
	case ContentImage:
		return json.Marshal(struct {
			common
			Data     string `json:"data"`
			MimeType string `json:"mimeType"`
			URI      string `json:"uri,omitempty"`
		}{c, b.Data, b.MimeType, b.URI})
	case ContentAudio:
		return json.Marshal(struct {
			common
			Data     string `json:"data"`
			MimeType string `json:"mimeType"`
		}{c, b.Data, b.MimeType})
	case ContentResourceLink:
		return json.Marshal(struct {
			common
			URI         string  `json:"uri"`
			Name        string  `json:"name"`
			Title       *string `json:"title,omitempty"`
			Description *string `json:"description,omitempty"`
			MimeType    string  `json:"mimeType,omitempty"`
			Size        *int64  `json:"size,omitempty"`
		}{c, b.URI, b.Name, b.Title, b.Description, b.MimeType, b.Size})
	case ContentResource:
		r := b.Resource
		if r == nil {
			r = &ResourceContents{}
		}
		return json.Marshal(struct {
			common
			Resource *ResourceContents `json:"resource"`
		}{c, r})
	default:
		// A type this package does not know is written as it was given.
		type plain ContentBlock
		return json.Marshal(plain(b))
	}
}

// ResourceContents is an embedded resource's contents: text, or a binary
// Blob (standard base64). Exactly one of Text and Blob is set.
type ResourceContents struct {
	URI      string  `json:"uri"`
	MimeType *string `json:"mimeType,omitempty"`
	Text     *string `json:"text,omitempty"`
	Blob     *string `json:"blob,omitempty"`
	Meta     Meta    `json:"_meta,omitempty"`
}

// Annotations tell a client who a block is for and how much it matters.
type Annotations struct {
	// Audience is "user", "assistant" or both.
	Audience     []string `json:"audience,omitempty"`
	LastModified *string  `json:"lastModified,omitempty"`
	Priority     *float64 `json:"priority,omitempty"`
	Meta         Meta     `json:"_meta,omitempty"`
}
