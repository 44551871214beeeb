package graphql

import (
	"errors"

	"github.com/btk-project/btk/internal/btk"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// presentChoices adds extensions.workspaces to the login error of an account
// with several workspaces, so that a client can offer the choice. It is
// told only to a caller who gave the right password.
func presentChoices(err error, gerr *gqlerror.Error) {
	var ce *btk.WorkspaceChoiceError
	if !errors.As(err, &ce) {
		return
	}
	ws := make([]map[string]any, len(ce.Workspaces))
	for i, m := range ce.Workspaces {
		ws[i] = map[string]any{"workspaceId": m.WorkspaceID, "workspaceName": m.WorkspaceName, "role": string(m.Role)}
	}
	gerr.Extensions["workspaces"] = ws
}
