package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/fenceq/fenceq/internal/jsonfill"
	"pgregory.net/rapid"
)

// TestDecodeAnswer_SameAsEncodingJSON holds the answer decoder (go-json) to
// encoding/json: every answer type, filled at random (jsonfill) and written
// by encoding/json as the server writes it, decodes into the same value;
// and a cut answer fails with both.
func TestDecodeAnswer_SameAsEncodingJSON(t *testing.T) {
	types := []any{
		Job{}, JobPage{}, batchAnswer{}, Stats{}, AuditPage{}, AuditReport{}, AuditCheckpoint{},
		Lease{}, LeasePage{}, LeaseCheck{}, JobCheck{}, QueueCounts{}, QueuePause{}, Refusal{},
		Schedule{}, SchedulePage{},
		struct {
			Jobs []Job `json:"jobs"`
		}{},
	}
	jsonfill.Check(t, types, func(t *rapid.T, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		typ := reflect.TypeOf(v).Elem()
		want, got := reflect.New(typ).Interface(), reflect.New(typ).Interface()
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(want); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if err := decodeAnswer(bytes.NewReader(b), got); err != nil {
			t.Fatalf("go-json: %v in %s", err, b)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s\nencoding/json %#v\ngo-json       %#v", b, want, got)
		}
		cut := b[:rapid.IntRange(0, len(b)-1).Draw(t, "cut")]
		if err := decodeAnswer(bytes.NewReader(cut), reflect.New(typ).Interface()); err == nil {
			t.Fatalf("go-json decoded a cut answer %q", cut)
		}
	})
}
