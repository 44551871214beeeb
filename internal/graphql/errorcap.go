package graphql

import (
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/validator/core"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// Errors in one answer are bounded (docs/security.md): at most maxErrors,
// then one more saying how many were left out, and their messages at most
// maxErrorMessage bytes each and maxErrorBytes in all. A document with
// conflicting aliases made gqlparser's validator report one error per
// conflicting pair (27,225 errors, a 7 MB answer, for 3.6 KB sent): its
// rules now stop building errors past the bound, and every answer is cut to
// it before it is written.
const (
	maxErrors       = 100
	maxErrorMessage = 512
	maxErrorBytes   = 32 << 10
	// omittedRule marks the error that counts what a validation left out.
	omittedRule = "btk:omitted"
)

// boundedRules returns gqlparser's default validation rules, each reporting
// through one shared budget: past maxErrors an error is counted, not built
// (nor its message formatted). A fresh budget is made for each validation.
func boundedRules() *rules.Rules {
	rs := rules.NewDefaultRules()
	b := &errorBudget{}
	for name, fn := range rs.GetInner() {
		rs.ReplaceRule(name, b.wrap(fn))
	}
	return rs
}

type errorBudget struct {
	n       int
	omitted *int // the count in the marker error, once there is one
}

func (b *errorBudget) wrap(fn core.RuleFunc) core.RuleFunc {
	return func(observers *core.Events, addError core.AddErrFunc) {
		fn(observers, func(options ...core.ErrorOption) {
			b.n++
			if b.n <= maxErrors {
				addError(options...)
				return
			}
			if b.omitted == nil {
				b.omitted = new(int)
				omitted := b.omitted
				addError(func(err *gqlerror.Error) {
					err.Rule = omittedRule
					err.Message = "more errors were left out"
					err.Extensions = map[string]any{"omitted": omitted}
				})
			}
			*b.omitted++
		})
	}
}

// capErrors bounds an answer's errors: the first maxErrors (within
// maxErrorBytes of messages, each cut to maxErrorMessage bytes), then one
// error saying how many were left out, with the code of the first.
func capErrors(errs gqlerror.List) gqlerror.List {
	if len(errs) == 0 {
		return errs
	}
	var out gqlerror.List
	omitted, size := 0, 0
	for _, e := range errs {
		if e == nil {
			continue
		}
		if e.Rule == omittedRule {
			if n, ok := e.Extensions["omitted"].(*int); ok {
				omitted += *n
			}
			continue
		}
		if len(out) == maxErrors || size+min(len(e.Message), maxErrorMessage) > maxErrorBytes {
			omitted++
			continue
		}
		if len(e.Message) > maxErrorMessage {
			c := *e
			c.Message = cutUTF8(e.Message, maxErrorMessage) + "…"
			e = &c
		}
		size += len(e.Message)
		out = append(out, e)
	}
	if omitted == 0 && len(out) == len(errs) {
		return errs
	}
	if omitted > 0 {
		summary := gqlerror.Errorf("%d more errors were left out (at most %d are told)", omitted, maxErrors)
		if len(out) > 0 {
			if code, ok := out[0].Extensions["code"]; ok {
				summary.Extensions = map[string]any{"code": code}
			}
		}
		out = append(out, summary)
	}
	return out
}

func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
