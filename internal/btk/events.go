package btk

// audit_events actions of account changes (docs/design.md#audit).
const (
	EventAccountPasswordChanged = "account.password_changed"
	EventAccountDisabled        = "account.disabled"
	EventAccountEnabled         = "account.enabled"
)
