package main

import (
	"net/url"

	"github.com/btk-project/btk/internal/store/postgres"
)

// displayDB is the --db value as it may be logged: a PostgreSQL URL without
// its password.
func displayDB(db string) string {
	if !postgres.IsURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
