package sqlshared

import (
	"errors"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, seq := range []int64{1, 42, 1 << 40} {
		got, err := AfterSeq('k', Cursor('k', seq))
		if err != nil || got != seq {
			t.Errorf("AfterSeq(Cursor(%d)) = %d, %v", seq, got, err)
		}
	}
	for _, c := range []string{"!", Cursor('a', 5), "aw", Cursor('k', 0)} {
		if _, err := AfterSeq('k', c); !errors.Is(err, btk.ErrBadCursor) {
			t.Errorf("AfterSeq(%q) = %v, want ErrBadCursor", c, err)
		}
	}
}

func TestUnixNanoRange(t *testing.T) {
	now := time.Date(2026, 11, 23, 5, 0, 0, 123, time.UTC)
	if n, err := UnixNano(now); err != nil || !FromNano(n).Equal(now) {
		t.Errorf("round trip of %v: %d %v", now, n, err)
	}
	if _, err := UnixNano(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)); err != btk.ErrTimeRange {
		t.Errorf("year 2300: %v, want ErrTimeRange", err)
	}
	if _, err := UnixNano(time.Time{}); err == nil {
		t.Error("the zero time was accepted")
	}
}
