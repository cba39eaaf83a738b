package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/fenceq/fenceq/api"
)

// TestGeneratedPythonModelsAreCurrent is the drift check: the Python
// client's generated types are what the generator writes from the
// OpenAPI document today.
func TestGeneratedPythonModelsAreCurrent(t *testing.T) {
	want, err := generatePython(api.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", pythonModels)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go run ./internal/sdkgen` from the repository root)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what internal/sdkgen writes from api/openapi.json: run `go run ./internal/sdkgen` from the repository root and commit the file", pythonModels)
	}
	for _, name := range []string{"class Job(TypedDict", "class ClaimRequest(TypedDict", "fencing_token: NotRequired[FencingToken]", `"claim": ("POST", "/v1/claim")`} {
		if !bytes.Contains(want, []byte(name)) {
			t.Errorf("the generated file lacks %q", name)
		}
	}
}
