// Package sqlshared holds what the SQL stores (SQLite, PostgreSQL) encode the
// same way, so that both hand out the same cursors and refuse the same times.
package sqlshared

import (
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// Cursor is base64url of a table tag and the seq of the last row handed out;
// the tag keeps a key cursor from being replayed on an audit list.
func Cursor(tag byte, seq int64) string {
	return base64.RawURLEncoding.EncodeToString(strconv.AppendInt([]byte{tag}, seq, 10))
}

// AfterSeq decodes a cursor of tag into the seq rows must be below.
func AfterSeq(tag byte, c string) (int64, error) {
	if c == "" {
		return math.MaxInt64, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != tag {
		return 0, btk.ErrBadCursor
	}
	seq, err := strconv.ParseInt(string(b[1:]), 10, 64)
	if err != nil || seq <= 0 || strconv.FormatInt(seq, 10) != string(b[1:]) {
		return 0, btk.ErrBadCursor
	}
	return seq, nil
}

// PageSize is the number of rows to return; the caller already clamps it.
func PageSize(first int) int {
	if first <= 0 {
		return btk.DefaultPageSize
	}
	return min(first, btk.MaxPageSize)
}

// Times are stored as integer unix nanoseconds, which only cover the years
// 1678 to 2262; a time outside is refused rather than silently wrapped.
var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// ErrTimeRange refuses a time that the stores cannot represent.
var ErrTimeRange = &btk.Error{Code: btk.CodeBadUserInput, Message: "time must be between the years 1678 and 2262"}

// UnixNano is the stored form of t.
func UnixNano(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, errors.New("store: zero time") // a bug of the caller, not user input
	}
	if t.Before(minTime) || t.After(maxTime) {
		return 0, ErrTimeRange
	}
	return t.UnixNano(), nil
}

// UsageRange is the stored form of a usage filter's [Since, Until), the
// hours both engines' usage queries read.
func UsageRange(f btk.UsageFilter) (since, until int64, err error) {
	if since, err = UnixNano(f.Since); err != nil {
		return 0, 0, err
	}
	until, err = UnixNano(f.Until)
	return since, until, err
}

// FromNano is the time of a stored value, in UTC.
func FromNano(n int64) time.Time { return time.Unix(0, n).UTC() }
