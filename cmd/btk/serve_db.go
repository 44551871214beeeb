package main

import (
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
)

// displayDB is the --db value as it may be logged: a PostgreSQL URL without
// its password, sslpassword or any other secret parameter (btk.RedactURL).
func displayDB(db string) string {
	if !postgres.IsURL(db) {
		return db
	}
	return btk.RedactURL(db)
}
