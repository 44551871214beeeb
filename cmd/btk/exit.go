package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// Exit codes, the contract of docs/design.md#exit-codes.
const (
	exitOK          = 0
	exitError       = 1  // any other failure
	exitUsage       = 2  // bad arguments or flags; a confirmation or secret that cannot be asked for
	exitAuth        = 3  // UNAUTHENTICATED, invalid or expired credential (any HTTP 401)
	exitForbidden   = 4  // FORBIDDEN, ELEVATION_REQUIRED, PLAN_UPGRADE_REQUIRED
	exitNotFound    = 5  // NOT_FOUND
	exitConflict    = 6  // NAME_TAKEN, KEY_REVOKED
	exitRateLimited = 7  // RATE_LIMITED
	exitUnreachable = 8  // no answer from the server
	exitKeysFound   = 9  // btk scan found keys (with --check: active ones)
	exitUnavailable = 10 // UNAVAILABLE: the server's database or Redis is busy or down; retry later
	// exitInterrupted: Ctrl-C (SIGINT) or SIGTERM, 128+2 as shells report it.
	exitInterrupted = 130
)

// usageError is a mistake in how btk was called.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// keysFoundError ends a btk scan that found keys (exit 9).
type keysFoundError struct{ msg string }

func (e *keysFoundError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// isUsage reports whether err is, or wraps, a usage error.
func isUsage(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

// exitCode maps an error to the process exit code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if isUsage(err) {
		return exitUsage
	}
	var fe *keysFoundError
	if errors.As(err, &fe) {
		return exitKeysFound
	}
	if errors.Is(err, errInterrupted) {
		return exitInterrupted
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		return exitError
	}
	switch ce.Status {
	case 401:
		return exitAuth
	case 429:
		return exitRateLimited
	}
	if code, ok := exitCodes[ce.Code]; ok {
		return code
	}
	return exitError
}

// exitCodes is the one table from an error code (internal/btk, and the
// client's own UNREACHABLE) to the exit code (docs/design.md#exit-codes).
// Codes not in it (BAD_USER_INPUT, INTERNAL, ...) exit 1.
var exitCodes = map[btk.Code]int{
	btk.CodeUnauthenticated:     exitAuth,
	btk.CodeForbidden:           exitForbidden,
	btk.CodeElevationRequired:   exitForbidden,
	btk.CodePlanUpgradeRequired: exitForbidden,
	btk.CodeNotFound:            exitNotFound,
	btk.CodeNameTaken:           exitConflict,
	btk.CodeKeyRevoked:          exitConflict,
	btk.CodeRateLimited:         exitRateLimited,
	btk.CodeUnavailable:         exitUnavailable,
	client.CodeUnreachable:      exitUnreachable,
}

// printError writes err to w as "btk: <message> (<CODE>)", with a pointer to
// the help of cmd for usage errors.
func printError(w io.Writer, cmd *cobra.Command, err error) {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code != "" {
		fmt.Fprintf(w, "btk: %s (%s)\n", printable(err.Error()), printable(string(ce.Code)))
	} else {
		fmt.Fprintf(w, "btk: %s\n", printable(err.Error()))
	}
	if exitCode(err) == exitUsage && cmd != nil {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}

// asUsage marks cobra's own argument errors as usage errors.
func asUsage(err error) error {
	if err == nil || isUsage(err) {
		return err
	}
	// Flag errors come through the root's FlagErrorFunc; these are the
	// errors cobra makes of arguments it checks itself.
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "invalid argument", "accepts "} {
		if strings.HasPrefix(msg, prefix) {
			return &usageError{msg}
		}
	}
	return err
}

// exactArgs is cobra.ExactArgs with usage errors that name the arguments.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("expected %d argument(s), got %d (usage: %s)", n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error { return exactArgs(0)(cmd, args) }

// exclusive fails with a usage error when more than one of the named flags was given.
func exclusive(cmd *cobra.Command, names ...string) error {
	var set []string
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			set = append(set, "--"+n)
		}
	}
	if len(set) > 1 {
		return usageErrorf("%s cannot be used together", strings.Join(set, " and "))
	}
	return nil
}
