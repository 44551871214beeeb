package btk

// audit_events actions of account changes (DESIGN §13).
const (
	EventAccountPasswordChanged = "account.password_changed"
	EventAccountDisabled        = "account.disabled"
	EventAccountEnabled         = "account.enabled"
)
