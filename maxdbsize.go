package main

import (
	"github.com/fenceq/fenceq/internal/cli"
	"math"
	"strconv"
)

// defaultMaxDBSize is --max-db-size's default. A 32-bit process maps the
// whole file into at most 2-3 GiB of address space that the Go heap, the
// stacks and the binary share, and bbolt remaps it at twice the size as it
// grows: a remap that cannot get the space leaves the store unusable. 512 MiB
// keeps the map (whose size is the file's rounded up to a power of two) well
// inside a 2 GiB/2 GiB kernel split. 64-bit builds have no such limit.
func defaultMaxDBSize() int64 {
	if strconv.IntSize == 32 {
		return 512 << 20
	}
	return 0
}

// maxDBSizeOption checks --max-db-size and turns it into db.Options.MaxSize.
func maxDBSizeOption(n int64) (int, error) {
	if n < 0 || n > math.MaxInt {
		return 0, cli.Usagef("--max-db-size must be between 0 (no limit) and %d on this platform, got %d", math.MaxInt, n)
	}
	if n != 0 && n < 1<<20 {
		return 0, cli.Usagef("--max-db-size must be 0 (no limit) or at least 1048576 (1 MiB), got %d", n)
	}
	return int(n), nil
}
