package btk

import (
	"errors"
	"testing"
)

func TestAuthorize(t *testing.T) {
	const ws, other = "ws", "other"
	owner := &Actor{AccountID: "a", WorkspaceID: ws, Role: RoleOwner}
	admin := &Actor{AccountID: "a", WorkspaceID: ws, Role: RoleAdmin}
	member := &Actor{AccountID: "a", WorkspaceID: ws, Role: RoleMember}
	key := &Actor{WorkspaceID: ws, KeyID: "k"}
	platform := &Actor{AccountID: "p", PlatformAdmin: true}
	impersonating := &Actor{AccountID: "p", PlatformAdmin: true, WorkspaceID: ws, Impersonating: true}
	platformMember := &Actor{AccountID: "p", PlatformAdmin: true, WorkspaceID: ws, Role: RoleMember}

	tests := []struct {
		name  string
		actor *Actor
		perm  permission
		ws    string
		want  error
	}{
		{"anonymous", nil, permWorkspace, "", ErrUnauthenticated},
		{"key reads its workspace", key, permWorkspace, "", nil},
		{"key is no user", key, permUser, "", ErrUserRequired},
		{"key cannot read keys", key, permReadKeys, "", ErrUserRequired},
		{"platform admin without workspace", platform, permWorkspace, "", ErrNoWorkspace},
		{"member cannot read keys", member, permReadKeys, "", ErrForbidden},
		{"admin reads keys", admin, permReadKeys, "", nil},
		{"admin cannot manage keys", admin, permManageKeys, "", ErrForbidden},
		{"owner manages keys", owner, permManageKeys, "", nil},
		{"owner: another workspace is not found", owner, permManageKeys, other, ErrNotFound},
		{"impersonating admin is owner tier", impersonating, permManageKeys, "", nil},
		{"platform admin as member is not owner tier", platformMember, permManageKeys, "", ErrForbidden},
		{"platform admin operates", platform, permOperate, "", nil},
		{"owner cannot operate", owner, permOperate, "", ErrForbidden},
		{"owner sets members of own workspace", owner, permMembers, ws, nil},
		{"owner cannot set members elsewhere", owner, permMembers, other, ErrNotFound},
		{"impersonating sets members", impersonating, permMembers, other, nil},
		{"admin cannot set members", admin, permMembers, ws, ErrForbidden},
		{"owner sets own limits", owner, permWorkspaceLimits, ws, nil},
		{"platform admin sets any limits", platform, permWorkspaceLimits, other, nil},
		{"admin cannot set limits", admin, permWorkspaceLimits, ws, ErrForbidden},
	}
	for _, tc := range tests {
		if got := authorize(tc.actor, tc.perm, tc.ws); !errors.Is(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
