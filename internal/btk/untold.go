package btk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// A change is told to the other instances after it commits (changed). A
// revocation the server makes on its own (the unused-key sweep) has no
// caller to repeat it when that tell fails, and the next sweep does not
// find the keys again: they are revoked. A leak report's caller is a
// scanner whose retries are its own; an owner's revoke, rotation, revoke-all
// or narrowing answered UNAVAILABLE may never be repeated either (a browser
// closed, a CI job that gave up), and the instance that committed it may
// stop before telling. So the transaction of every such change also lists
// the workspace in the setting untoldSetting, a tell made after the commit
// takes it off, and every instance tells the workspaces listed every few
// seconds (TellUntold): a failed tell is repeated until it succeeds, also
// when the instance that committed the change has stopped
// (docs/clusters.md#shared-state-in-redis). The list is empty but for
// failures, and has at most one entry per workspace. One node has no other
// instance to tell: nothing is listed there.
const untoldSetting = "untold_workspaces"

// untold maps a workspace id to the mark of the latest transaction that
// listed it: a tell takes an entry off only if no later revocation listed
// the workspace again meanwhile (that one's tell may yet fail).
type untold map[string]string

func readUntold(ctx context.Context, tx Tx) (untold, error) {
	u := untold{}
	v, err := tx.Setting(ctx, untoldSetting)
	if errors.Is(err, ErrNotFound) {
		return u, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(v), &u); err != nil {
		return nil, fmt.Errorf("stored %s: %w", untoldSetting, err)
	}
	return u, nil
}

func writeUntold(ctx context.Context, tx Tx, u untold) error {
	b, err := json.Marshal(u)
	if err != nil {
		return err
	}
	return tx.SetSetting(ctx, untoldSetting, string(b))
}

// markUntold lists the workspaces as not yet told, in the transaction
// of the change, and returns their marks for told; nothing on one node.
func (s *Service) markUntold(ctx context.Context, tx Tx, workspaceIDs ...string) (untold, error) {
	if !s.clustered {
		return nil, nil
	}
	u, err := readUntold(ctx, tx)
	if err != nil {
		return nil, err
	}
	marks := untold{}
	for _, id := range workspaceIDs {
		marks[id] = uuid.NewString()
		u[id] = marks[id]
	}
	return marks, writeUntold(ctx, tx, u)
}

// told takes off the list the workspaces of done (id → mark), each told
// after the transaction that listed it committed.
func (s *Service) told(ctx context.Context, done untold) error {
	if len(done) == 0 {
		return nil
	}
	return s.store.Write(ctx, func(tx Tx) error {
		u, err := readUntold(ctx, tx)
		if err != nil {
			return err
		}
		n := len(u)
		for id, mark := range done {
			if u[id] == mark {
				delete(u, id)
			}
		}
		if len(u) == n {
			return nil
		}
		return writeUntold(ctx, tx, u)
	})
}

// tell tells the other instances of a committed change to workspaceID's
// keys or limits (changed) and takes the workspace off the list where its
// transaction listed it (marks). The change is told once changed returns:
// should taking it off fail, the next sweep run tells it again, which
// costs the instances one read of the workspace's keys and changes nothing.
func (s *Service) tell(ctx context.Context, workspaceID string, marks untold) error {
	if err := s.changed(ctx, workspaceID); err != nil {
		return err
	}
	_ = s.told(ctx, marks)
	return nil
}

// TellUntold tells the instances of the workspaces listed, and takes off
// the list those it told. btk serve runs it every few seconds on every
// instance (and each sweep run first), so a change whose instance stopped
// before telling (killed mid-revoke) reaches the others within seconds,
// not at the next sweep a minute later. One node lists nothing, but may
// find a list left from when it ran with Redis: it empties it.
func (s *Service) TellUntold(ctx context.Context) error {
	u, err := read(ctx, s.store, func(tx Tx) (untold, error) { return readUntold(ctx, tx) })
	if err != nil || len(u) == 0 {
		return err
	}
	done := untold{}
	var errs []error
	for id, mark := range u {
		if err := s.changed(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		done[id] = mark
	}
	return errors.Join(append(errs, s.told(ctx, done))...)
}
