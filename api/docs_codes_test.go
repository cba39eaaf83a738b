package api_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/fenceq/fenceq/api"
)

// The error codes the docs list are the server's table (errorCodes), exactly:
// docs/api.md's errors table row by row, and every code and status of the
// table named in docs/design.md's summary (issue 18, item 16).
func TestDocsListTheServersErrorCodes(t *testing.T) {
	table, _ := api.ErrorCodesForTest()

	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string][]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\d{3}) \\|").FindAllStringSubmatch(string(raw), -1) {
		n, _ := strconv.Atoi(m[2])
		documented[m[1]] = append(documented[m[1]], n)
	}
	for code, statuses := range table {
		for _, st := range statuses {
			if !slices.Contains(documented[code], st) {
				t.Errorf("docs/api.md's errors table lacks %s %d, which the server sends", code, st)
			}
		}
	}
	for code, statuses := range documented {
		for _, st := range statuses {
			if !slices.Contains(table[code], st) {
				t.Errorf("docs/api.md's errors table lists %s %d, which the server never sends", code, st)
			}
		}
	}

	design, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for code, statuses := range table {
		for _, st := range statuses {
			if !regexp.MustCompile("`" + code + "`[^.;]*?" + strconv.Itoa(st) + "|" + strconv.Itoa(st) + "[^.;]*?`" + code + "`").Match(design) {
				t.Errorf("docs/design.md's error summary does not name %s with %d", code, st)
			}
		}
	}
}
