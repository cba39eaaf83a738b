// Package e2e holds fenceq's end-to-end tests: each runs the real binary
// (built once by TestMain in harness_test.go) against a real file or a real
// PostgreSQL, over real HTTP. One file per guarantee; docs/guarantees.md
// names every test, and TestDocs_EveryEndToEndTestIsNamedInTheDocs fails
// when one is not. Run them with:
//
//	go test -race -count=1 ./e2e
package e2e
