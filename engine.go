package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
)

// openEngine opens the store --db names: a postgres:// or postgresql://
// URL is a PostgreSQL database that several servers may share; anything
// else is a bbolt file, opened with boltOpts.
func openEngine(ctx context.Context, dsn string, rules db.Rules, boltOpts bolt.Options) (db.Store, error) {
	if postgres.IsURL(dsn) {
		return postgres.Open(ctx, dsn, postgres.Options{Rules: rules})
	}
	boltOpts.Rules = rules
	store, err := bolt.Open(dsn, boltOpts)
	if errors.Is(err, bolt.ErrLocked) {
		return nil, fmt.Errorf("%w; is another fenceq serving this file?", err)
	}
	if err != nil {
		return nil, err
	}
	return store, nil
}

// displayDB is --db as logs show it: a URL without its password.
func displayDB(dsn string) string {
	if !postgres.IsURL(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(malformed URL)"
	}
	return u.Redacted()
}
