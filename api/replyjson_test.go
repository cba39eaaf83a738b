package api

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fenceq/fenceq/internal/jsonfill"
	"pgregory.net/rapid"
)

// TestReplyEncoder_SameBytesAsEncodingJSON holds the reply encoder
// (go-json) to encoding/json's Encoder, byte for byte, for every reply type
// the server writes, filled at random by jsonfill (what it draws: escapes,
// raw JSON to compact, omitempty and omitzero, sorted map keys).
func TestReplyEncoder_SameBytesAsEncodingJSON(t *testing.T) {
	types := []any{
		jobResponse{}, jobsResponse{}, batchResponse{}, itemResponse{}, errorBody{},
		queueResponse{}, statusResponse{}, jobListResponse{}, whoamiResponse{},
		leaseResponse{}, pauseResponse{}, auditRecordResponse{}, auditReportResponse{},
		refusalResponse{}, auditCheckpointResponse{}, zombie{}, throughputCounts{},
	}
	jsonfill.Check(t, types, func(t *rapid.T, v any) {
		for _, indent := range []string{"", "  "} {
			var want, got bytes.Buffer
			std := json.NewEncoder(&want)
			std.SetIndent("", indent)
			wantErr := std.Encode(v)
			gotErr := encodeReply(&got, v, indent)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("encoding/json error %v, go-json error %v", wantErr, gotErr)
			}
			if !bytes.Equal(want.Bytes(), got.Bytes()) {
				t.Fatalf("indent %q:\nencoding/json %s\ngo-json       %s", indent, want.Bytes(), got.Bytes())
			}
		}
	})
}
