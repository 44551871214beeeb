package postgres

import "database/sql"

// PoolStats reports the connection pool in database/sql's terms, as the
// SQLite store reports its two pools (for the metrics).
func (db *DB) PoolStats() map[string]sql.DBStats {
	s := db.pool.Stat()
	return map[string]sql.DBStats{"postgres": {
		MaxOpenConnections: int(s.MaxConns()),
		OpenConnections:    int(s.TotalConns()),
		InUse:              int(s.AcquiredConns()),
		Idle:               int(s.IdleConns()),
		WaitCount:          s.EmptyAcquireCount(),
		WaitDuration:       s.EmptyAcquireWaitTime(),
		MaxIdleClosed:      s.MaxIdleDestroyCount(),
		MaxLifetimeClosed:  s.MaxLifetimeDestroyCount(),
	}}
}
