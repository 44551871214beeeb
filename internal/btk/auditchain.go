package btk

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// The tamper-evident audit (docs/webhooks.md#the-audit-chain): every
// audit_events row of a chain (a workspace's rows, or the server-wide rows
// that belong to no workspace) carries its position in the chain (1, 2, …)
// and hash_n = SHA-256(hash_{n-1} ‖ canonical(row_n)), hash_0 being 32 zero
// bytes. The store computes it with ChainHash when it writes the row, under
// a lock on the chain's head, so every chain stays linear under concurrent
// writers.

// ChainServerWide is the chain name of the rows that belong to no workspace;
// a workspace's chain is named by the workspace id.
const ChainServerWide = ""

// ChainLink is one row's place in its chain.
type ChainLink struct {
	Seq  int64  // 1-based position in the chain
	Hash string // lowercase hex SHA-256
}

// AuditHead is the latest link of a chain: its hash, how many rows the
// chain has, and when the latest was written. An empty chain has Count 0,
// the zero hash and no time.
type AuditHead struct {
	Hash  string
	Count int64
	At    *time.Time
}

// ZeroChainHash is hash_0, the "previous hash" of a chain's first row.
var ZeroChainHash = hex.EncodeToString(make([]byte, sha256.Size))

// CanonicalAuditRow is the byte string a row's hash covers: each field as a
// 4-byte big-endian length followed by its UTF-8 bytes, in this order: id,
// workspace id, chain position (decimal), action, actor id, actor email,
// impersonator id, target type, target id, metadata (the JSON text as
// stored), created at (Unix nanoseconds, decimal). Absent values are empty
// strings.
func CanonicalAuditRow(ev *AuditEvent, seq int64, createdNano int64) []byte {
	fields := [...]string{
		ev.ID, ev.WorkspaceID, strconv.FormatInt(seq, 10), ev.Action, ev.ActorID, ev.ActorEmail,
		ev.ImpersonatorID, ev.TargetType, ev.TargetID, ev.Metadata, strconv.FormatInt(createdNano, 10),
	}
	n := 0
	for _, f := range fields {
		n += 4 + len(f)
	}
	b := make([]byte, 0, n)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f))) // #nosec G115 -- audit fields are bounded far below 4 GiB (docs/security.md#bounds-on-a-request)
		b = append(b, f...)
	}
	return b
}

// ChainHash returns the hex hash of a row that follows prevHex in its chain.
func ChainHash(prevHex string, ev *AuditEvent, seq int64, createdNano int64) (string, error) {
	prev, err := hex.DecodeString(prevHex)
	if err != nil || len(prev) != sha256.Size {
		return "", fmt.Errorf("audit chain: bad previous hash %q", prevHex)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(CanonicalAuditRow(ev, seq, createdNano))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ChainRow is an audit_events row as the chain verification reads it: the
// row, its stored link (Seq 0 / Hash "" when the column is empty) and its
// created_at exactly as stored.
type ChainRow struct {
	// Order is the row's place in the table (its seq): rows are checked
	// in that order, and Order pages through them.
	Order       int64
	Event       AuditEvent
	Link        ChainLink
	CreatedNano int64
}

// ChainProblem is the first row of a chain that does not match.
type ChainProblem struct {
	// EventID is the row's id ("" when rows are missing at the end).
	EventID string
	// Seq is the chain position the row should have had.
	Seq    int64
	Reason string
}

// ChainVerification is the result of recomputing one chain.
type ChainVerification struct {
	Chain   string // workspace id, or "" for the server-wide chain
	Intact  bool
	Count   int64 // rows checked
	Head    AuditHead
	Problem *ChainProblem
}

// chainVerifier recomputes a chain row by row, in stored position order.
type chainVerifier struct {
	prev    string
	want    int64 // the position the next row must have
	problem *ChainProblem
}

func newChainVerifier() *chainVerifier { return &chainVerifier{prev: ZeroChainHash, want: 1} }

// add checks the next row; after the first problem it checks nothing more.
func (v *chainVerifier) add(r *ChainRow) {
	if v.problem != nil {
		return
	}
	fail := func(reason string) {
		v.problem = &ChainProblem{EventID: r.Event.ID, Seq: v.want, Reason: reason}
	}
	switch {
	case r.Link.Hash == "" || r.Link.Seq == 0:
		fail("the row has no chain hash (inserted outside btk)")
		return
	case r.Link.Seq > v.want:
		if r.Link.Seq == v.want+1 {
			fail(fmt.Sprintf("row %d of the chain is missing before this row (deleted, or rows were moved)", v.want))
		} else {
			fail(fmt.Sprintf("rows %d to %d of the chain are missing before this row (deleted, or rows were moved)", v.want, r.Link.Seq-1))
		}
		return
	case r.Link.Seq < v.want:
		fail(fmt.Sprintf("the row repeats chain position %d (inserted or copied)", r.Link.Seq))
		return
	}
	want, err := ChainHash(v.prev, &r.Event, r.Link.Seq, r.CreatedNano)
	if err != nil || want != r.Link.Hash {
		fail("the row's content does not match its hash (edited), or its hash was replaced")
		return
	}
	v.prev = r.Link.Hash
	v.want++
}

// finish compares the chain with its recorded head.
func (v *chainVerifier) finish(head AuditHead) {
	if v.problem != nil {
		return
	}
	checked := v.want - 1
	switch {
	case head.Count > checked:
		v.problem = &ChainProblem{Seq: checked + 1,
			Reason: fmt.Sprintf("the chain head counts %d rows but only %d are present: the latest rows were deleted", head.Count, checked)}
	case head.Count < checked:
		v.problem = &ChainProblem{Seq: head.Count + 1,
			Reason: fmt.Sprintf("the chain has %d rows but its head counts %d: the head was edited", checked, head.Count)}
	case checked > 0 && head.Hash != v.prev:
		v.problem = &ChainProblem{Seq: checked, Reason: "the chain head's hash does not match the latest row (the head was edited)"}
	}
}

// chainPageSize is how many rows VerifyAuditChain reads per transaction.
const chainPageSize = 1000

// MaxChainVerifications bounds the verifications of audit chains running at
// once on an instance: each reads a whole chain, and owners may ask for it
// as often as they like (docs/webhooks.md#the-audit-chain). A chain is
// verified once at a time, so one workspace never holds every slot.
const MaxChainVerifications = 2

// ErrVerificationsBusy refuses a verification while MaxChainVerifications
// are running.
var ErrVerificationsBusy = &Error{Code: CodeUnavailable, Message: "too many audit chain verifications are running; try again shortly"}

// VerifyAuditChain recomputes the chain of workspaceID ("" and serverWide
// for the rows of no workspace) and reports the first row that does not
// match. Owner tier for its own workspace; a platform admin for any
// workspace and for the server-wide chain.
func (s *Service) VerifyAuditChain(ctx context.Context, a *Actor, workspaceID string, serverWide bool) (*ChainVerification, error) {
	chain, err := s.chainFor(ctx, a, workspaceID, serverWide)
	if err != nil {
		return nil, err
	}
	// One verification of a chain at a time: a second would read the same
	// rows for the same answer, and one owner asking in a loop must not
	// hold every slot.
	turn := s.verifyTurns.join(chain)
	defer s.verifyTurns.leave(chain, turn)
	select {
	case turn.held <- struct{}{}:
		defer func() { <-turn.held }()
	default:
		return nil, ErrVerificationsBusy
	}
	if s.verifying.Add(1) > MaxChainVerifications {
		s.verifying.Add(-1)
		return nil, ErrVerificationsBusy
	}
	defer s.verifying.Add(-1)
	v := newChainVerifier()
	res := &ChainVerification{Chain: chain}
	var after int64
	for {
		var rows []*ChainRow
		err := s.store.Read(ctx, func(tx Tx) (err error) {
			if after == 0 {
				if res.Head, err = tx.AuditChainHead(ctx, chain); err != nil {
					return err
				}
			}
			rows, err = tx.AuditChainRows(ctx, chain, after, chainPageSize)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			v.add(r)
			res.Count++
		}
		if len(rows) < chainPageSize || v.problem != nil {
			break
		}
		after = rows[len(rows)-1].Order
	}
	// Rows written after the head was read are not a problem: the head
	// bounds what is checked.
	v.finish(res.Head)
	res.Problem, res.Intact = v.problem, v.problem == nil
	return res, nil
}

// AuditHead returns the latest link of a chain (same roles as VerifyAuditChain).
func (s *Service) AuditHead(ctx context.Context, a *Actor, workspaceID string, serverWide bool) (AuditHead, error) {
	chain, err := s.chainFor(ctx, a, workspaceID, serverWide)
	if err != nil {
		return AuditHead{}, err
	}
	return read(ctx, s.store, func(tx Tx) (AuditHead, error) { return tx.AuditChainHead(ctx, chain) })
}

// chainFor decides who may read which chain.
func (s *Service) chainFor(ctx context.Context, a *Actor, workspaceID string, serverWide bool) (string, error) {
	if serverWide || (workspaceID != "" && a.IsUser() && a.PlatformAdmin) {
		if err := authorize(a, permOperate, ""); err != nil {
			return "", err
		}
		if serverWide {
			return ChainServerWide, nil
		}
		if uuid.Validate(workspaceID) != nil {
			return "", ErrNotFound
		}
		err := s.store.Read(ctx, func(tx Tx) error {
			_, err := tx.Workspace(ctx, workspaceID)
			return err
		})
		return workspaceID, err
	}
	if err := authorize(a, permManageKeys, workspaceID); err != nil {
		return "", err
	}
	return a.WorkspaceID, nil
}
