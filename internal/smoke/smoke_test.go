package smoke

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The smoke checks pass on this platform's own build; .ci/qemu.sh runs the
// same checks on the arm64 and armv7 release builds under qemu.
func TestRun_NativeBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fenceq")
	build := exec.Command("go", "build", "-o", bin, "github.com/fenceq/fenceq")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out strings.Builder
	err := Run(context.Background(), Config{Bin: bin, Dir: t.TempDir(), MaxDBSize: 1 << 20, Out: &out})
	t.Logf("smoke output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stale token 1 refused: 409 failed_precondition", "still completed", "refused 507 resource_exhausted", "reads go on"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("smoke output does not report %q", want)
		}
	}
}
