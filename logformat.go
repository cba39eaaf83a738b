package main

import (
	"github.com/fenceq/fenceq/internal/cli"
	"io"
	"log/slog"
)

// newLogger is the server's logger for --log-format and --log-level: slog's
// text handler (key=value lines for people and journalctl) or its JSON
// handler (one object a line, for log shippers).
func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, cli.Usagef("--log-level must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, cli.Usagef("--log-format must be text or json, got %q", format)
}
