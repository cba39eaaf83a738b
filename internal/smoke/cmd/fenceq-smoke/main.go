// Command fenceq-smoke runs a fenceq binary through the smoke checks of
// package smoke, natively or under an emulator, and prints each check:
//
//	go run ./internal/smoke/cmd/fenceq-smoke -bin dist/…/fenceq -emulator qemu-arm-static -max-db-size 1048576
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fenceq/fenceq/internal/smoke"
)

func main() {
	bin := flag.String("bin", "", "the fenceq binary to check")
	emu := flag.String("emulator", "", "run the binary under this command, e.g. qemu-arm-static (space-separated arguments)")
	maxDB := flag.Int64("max-db-size", 0, "also fill a file bounded by this --max-db-size (0: skip)")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "fenceq-smoke: -bin is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "fenceq-smoke-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenceq-smoke:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = smoke.Run(ctx, smoke.Config{Bin: *bin, Emulator: strings.Fields(*emu), Dir: dir, MaxDBSize: *maxDB, Out: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	fmt.Println("PASS", *bin)
}
