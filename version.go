package main

import (
	"encoding/json"
	"fmt"
	"github.com/fenceq/fenceq/internal/cli"
	"io"

	"github.com/fenceq/fenceq/internal/buildinfo"
)

// versionCommand: fenceq version [--json], and fenceq --version.
func versionCommand(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("fenceq version", stderr)
	asJSON := fs.Bool("json", false, "print the build information as JSON")
	cli.SetUsage(fs, stdout, "fenceq version [--json]", "Print the version, the commit it was built from and the Go version (also fenceq --version).")
	if err := cli.ParseWithEnv(fs, args); err != nil {
		return err
	}
	info := buildinfo.Read()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	_, err := fmt.Fprintln(stdout, info)
	return err
}
