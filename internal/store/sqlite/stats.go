package sqlite

import "database/sql"

// PoolStats reports the two connection pools (for the metrics): the single
// writer connection and the readers.
func (db *DB) PoolStats() map[string]sql.DBStats {
	return map[string]sql.DBStats{"writer": db.w.Stats(), "reader": db.r.Stats()}
}
