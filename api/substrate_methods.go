package api

// Params and results of the substrate.* methods. Paths are absolute: the
// daemon's own working directory means nothing to its clients, so a relative
// path is refused rather than resolved against it.
type (
	SubstrateInfoParams struct{}

	RunCommandParams struct {
		Command string `json:"command"`
		// TimeoutSecs bounds the command; absent means the substrate's
		// default (10 minutes locally).
		TimeoutSecs int `json:"timeout_secs,omitempty"`
	}
	PathParams struct {
		Path string `json:"path"`
	}
	ReadTextResult struct {
		Content string `json:"content"`
	}
	WriteTextParams struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		// CreateOnly writes only to a path confirmed missing; an existing
		// or unknown path is refused (fails closed).
		CreateOnly bool `json:"create_only,omitempty"`
	}
	ReadBytesParams struct {
		Path   string `json:"path"`
		Offset int64  `json:"offset,omitempty"`
		// Length absent reads to the end of the file.
		Length *int64 `json:"length,omitempty"`
	}
	BytesResult struct {
		ContentB64 string `json:"content_b64"`
	}
	WriteBytesParams struct {
		Path       string `json:"path"`
		ContentB64 string `json:"content_b64"`
	}
	WriteResult struct {
		Path  string `json:"path"`
		Bytes int    `json:"bytes"`
	}
	PTYStartParams struct {
		Command string `json:"command"`
	}
	PTYResult struct {
		PID int `json:"pid"`
	}
	PTYInputParams struct {
		PID  int    `json:"pid"`
		Data string `json:"data"`
	}
	PTYPIDParams struct {
		PID int `json:"pid"`
	}
	PTYReadResult struct {
		Data string `json:"data"`
	}
	PTYResizeParams struct {
		PID  int    `json:"pid"`
		Rows uint16 `json:"rows"`
		Cols uint16 `json:"cols"`
	}
	OKResult struct {
		OK bool `json:"ok"`
	}
)

func (p RunCommandParams) Validate() error {
	if p.Command == "" {
		return InvalidField("command", "is required")
	}
	if p.TimeoutSecs < 0 || p.TimeoutSecs > 86400 {
		return InvalidField("timeout_secs", "must be between 1 and 86400 seconds, or absent")
	}
	return nil
}

func requirePath(p string) error {
	if p == "" {
		return InvalidField("path", "is required")
	}
	return nil
}

func (p PathParams) Validate() error       { return requirePath(p.Path) }
func (p WriteTextParams) Validate() error  { return requirePath(p.Path) }
func (p WriteBytesParams) Validate() error { return requirePath(p.Path) }
func (p ReadBytesParams) Validate() error {
	if err := requirePath(p.Path); err != nil {
		return err
	}
	if p.Offset < 0 {
		return InvalidField("offset", "must not be negative")
	}
	if p.Length != nil && *p.Length < 0 {
		return InvalidField("length", "must not be negative; leave it out to read to the end")
	}
	return nil
}
func (p PTYStartParams) Validate() error {
	if p.Command == "" {
		return InvalidField("command", "is required")
	}
	return nil
}
func (p PTYResizeParams) Validate() error {
	if p.Rows == 0 || p.Cols == 0 {
		return InvalidField("rows", "rows and cols must both be at least 1")
	}
	return nil
}
