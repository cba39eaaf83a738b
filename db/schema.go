package db

import (
	"errors"
	"fmt"
)

// ErrSchemaNewer refuses to open a store whose layout is newer than the
// build: it was written by a later fenceq, and this one would not know what
// it may and may not change.
var ErrSchemaNewer = errors.New("db: the store was written by a newer fenceq")

// CheckSchema is the schema-version rule every engine follows when it
// opens a store. A store records the version of its layout; have is that
// version (0: a new, empty store), want the version this build writes.
// It returns whether the engine must upgrade the store — run its upgrades
// from have to want and record want, all in one transaction, so that a
// store is at one version or the other, never in between — or an error
// wrapping ErrSchemaNewer when have is above want. A new store is made at
// want and needs no upgrade. Every change of stored state that an older
// build would not understand (a new bucket or table, a new record field
// with a meaning) bumps the engine's version.
func CheckSchema(store string, have, want uint64) (upgrade bool, err error) {
	switch {
	case have > want:
		return false, fmt.Errorf("%w: %s has schema version %d and this build reads versions up to %d; run the fenceq that wrote it, or a newer one", ErrSchemaNewer, store, have, want)
	case have == 0:
		return false, nil
	default:
		return have < want, nil
	}
}
