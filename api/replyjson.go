package api

// Replies are written by goccy/go-json rather than encoding/json: the same
// bytes (TestReplyEncoder_SameBytesAsEncodingJSON holds every reply type to
// that), in a fifth of the CPU. A batch reply of 16 completed and 16 claimed
// jobs took 192 µs to encode with encoding/json and 37 µs with go-json on
// the 2-core machine of docs/performance.md, where the server's CPU per job
// bounds a Worker's drain. Requests are still decoded by encoding/json: the
// 400s name its errors (decode.go).

import (
	"io"

	gojson "github.com/goccy/go-json"
	"github.com/labstack/echo/v4"
)

// replySerializer is echo's JSON serializer with go-json's encoder;
// decoding stays echo's own (the handlers decode their bodies themselves).
type replySerializer struct{ echo.DefaultJSONSerializer }

func (replySerializer) Serialize(c echo.Context, v any, indent string) error {
	return encodeReply(c.Response(), v, indent)
}

// encodeReply writes v as encoding/json's Encoder would: HTML characters
// escaped, a newline at the end.
func encodeReply(w io.Writer, v any, indent string) error {
	enc := gojson.NewEncoder(w)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(v)
}
