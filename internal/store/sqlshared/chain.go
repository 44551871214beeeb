package sqlshared

import (
	"cmp"
	"slices"

	"github.com/btk-project/btk/internal/btk"
)

// ChainLink is a row of a rotation chain's walk: its side (newer or
// older), a key id and its distance from the key walked from (0 for that
// key itself).
type ChainLink struct {
	Newer bool
	ID    string
	N     int
}

// ScanChainLink scans a row of (side: 1 newer, 0 older; id; distance).
func ScanChainLink(row Row) (ChainLink, error) {
	var l ChainLink
	var side int
	err := row.Scan(&side, &l.ID, &l.N)
	l.Newer = side == 1
	return l, err
}

// ChainSides sorts the rows of a rotation chain's walk into the ids of
// each side, nearest first: btk.Tx.RotationChain's answer. ErrNotFound
// when the key walked from is not among them.
func ChainSides(links []ChainLink) (older, newer []string, err error) {
	found := false
	links = slices.DeleteFunc(links, func(l ChainLink) bool {
		found = found || l.N == 0
		return l.N == 0
	})
	if !found {
		return nil, nil, btk.ErrNotFound
	}
	slices.SortStableFunc(links, func(a, b ChainLink) int { return cmp.Compare(a.N, b.N) })
	for _, l := range links {
		if l.Newer {
			newer = append(newer, l.ID)
		} else {
			older = append(older, l.ID)
		}
	}
	return older, newer, nil
}
