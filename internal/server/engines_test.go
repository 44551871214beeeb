package server_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testproc"
)

// onPostgres reports whether t runs under TestPostgres: newEnv then opens a
// PostgreSQL schema of its own instead of a SQLite file.
func onPostgres(t testing.TB) bool { return strings.HasPrefix(t.Name(), "TestPostgres/") }

// TestPostgres runs the server's HTTP tests of the store-bound behaviour
// (lifecycle, concurrency, the role matrix, persisted rate limits and usage,
// health, a key's networks and scopes, the workspace key policy) once more
// against a PostgreSQL-backed instance. The tests are the same functions;
// only newEnv's engine differs. Paging and audit filters are
// covered on PostgreSQL by the store conformance suite.
func TestPostgres(t *testing.T) {
	if os.Getenv(pgtest.Env) == "" {
		t.Skip(pgtest.Env + " is not set: skipping the HTTP tests on PostgreSQL")
	}
	runAll(t, storeTests)
	runAll(t, sharedStateTests)
}

// namedTest is a test function run once more on other engines.
type namedTest struct {
	name string
	fn   func(*testing.T)
}

func runAll(t *testing.T, tests []namedTest) {
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

// storeTests run once more on PostgreSQL: what the store alone decides.
var storeTests = []namedTest{
	{"TestRotateRefusals", TestRotateRefusals},
	{"TestPlanGating", TestPlanGating},
	{"TestErrorsOfSpec", TestErrorsOfSpec},
	{"TestClientTenantHeaderIgnored", TestClientTenantHeaderIgnored},
	{"TestConcurrentCreateSameName", TestConcurrentCreateSameName},
	{"TestRotateUnderLoad", TestRotateUnderLoad},
	{"TestRevokeAllUnderLoad", TestRevokeAllUnderLoad},
	{"TestConcurrentRotateSameKey", TestConcurrentRotateSameKey},
	{"TestConcurrentRevokeSameKey", TestConcurrentRevokeSameKey},
	{"TestRoleMatrix", TestRoleMatrix},
	{"TestLastOwnerStays", TestLastOwnerStays},
	{"TestUnstorableInputIsTheCallers", TestUnstorableInputIsTheCallers},
	{"TestAuditEventsInTheChangesTransaction", TestAuditEventsInTheChangesTransaction},
	{"TestBootstrapIsAudited", TestBootstrapIsAudited},
	{"TestKeyHistoryAcrossRotations", TestKeyHistoryAcrossRotations},
	{"TestRotationChainBounded", TestRotationChainBounded},
	{"TestKeyRowReadsBatched", TestKeyRowReadsBatched},
	{"TestWebhooksOverGraphQL", TestWebhooksOverGraphQL},
	{"TestWebhookBoundsOverGraphQL", TestWebhookBoundsOverGraphQL},
	{"TestKeysPerWorkspaceBounded", TestKeysPerWorkspaceBounded},
	{"TestExpiredSessionsPruned", TestExpiredSessionsPruned},
	{"TestScansBounded", TestScansBounded},
	{"TestKeyUsageSeriesTakeTheWorkspaceTurn", TestKeyUsageSeriesTakeTheWorkspaceTurn},
	{"TestPostgresUnreachable", testPostgresUnreachable},
	{"TestPostgresHung", testPostgresHung},
	{"TestCanaryKeptWhileUnreachable", testCanaryKeptWhileUnreachable},
}

// sharedStateTests run once more on PostgreSQL and on PostgreSQL + Redis:
// what the shared state (revocation, rate limits, usage, health, the
// access checks that decide before the limits count) decides as well.
var sharedStateTests = []namedTest{
	{"TestLeakReportSigned", TestLeakReportSigned},
	{"TestCanaryAnswersAsUnknownAndIsRecorded", TestCanaryAnswersAsUnknownAndIsRecorded},
	{"TestCreateKeyAuthenticatesAndIsAudited", TestCreateKeyAuthenticatesAndIsAudited},
	{"TestRotateInheritsAndRevokesOldKeyAtOnce", TestRotateInheritsAndRevokesOldKeyAtOnce},
	{"TestRevoke", TestRevoke},
	{"TestRevokeAll", TestRevokeAll},
	{"TestLogout", TestLogout},
	{"TestRevokeUnderLoad", TestRevokeUnderLoad},
	{"TestRevokeUnderLoadColdCache", TestRevokeUnderLoadColdCache},
	{"TestRateLimitDayCountsSurviveRestart", TestRateLimitDayCountsSurviveRestart},
	{"TestLastUsedAt", TestLastUsedAt},
	{"TestHealthEndpoints", TestHealthEndpoints},
	{"TestKeyNetworksAtEveryEntryPoint", TestKeyNetworksAtEveryEntryPoint},
	{"TestAccessRulesAtEveryEntryPoint", TestAccessRulesAtEveryEntryPoint},
	{"TestRestrictionRefusalsCountNothing", TestRestrictionRefusalsCountNothing},
	{"TestCreateKeyRestrictionsValidated", TestCreateKeyRestrictionsValidated},
	{"TestUpdateAPIKey", TestUpdateAPIKey},
	{"TestWorkspaceKeyPolicy", TestWorkspaceKeyPolicy},
	{"TestRevokeUnusedSweep", TestRevokeUnusedSweep},
	{"TestWorkspaceChangesBudgeted", TestWorkspaceChangesBudgeted},
}

// PostgreSQL unreachable: an operation that needs the database answers
// UNAVAILABLE and /readyz 503; once the server is back, both recover without
// a restart. The network between btk and PostgreSQL is a TCP relay the test
// cuts and restores.
func testPostgresUnreachable(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	relay := testproc.NewRelay(t, hostOf(t, url))
	// newEnv opens pgtest.URL's schema: point it at the relay instead.
	e := newEnvOn(t, strings.Replace(url, hostOf(t, url), relay.Addr, 1), nil)
	login := func() response {
		return e.do(cred{}, `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
			map[string]any{"e": adminEmail, "p": adminPassword})
	}
	token := e.login(adminEmail, adminPassword, "")

	relay.Cut()
	r := login()
	if r.Code() != string(btk.CodeUnavailable) {
		t.Fatalf("login with PostgreSQL unreachable: HTTP %d %+v, want UNAVAILABLE", r.Status, r.Errors)
	}
	if strings.Contains(r.Errors[0].Message, "127.0.0.1") || strings.Contains(r.Errors[0].Message, "dial") {
		t.Errorf("the error shows connection details: %q", r.Errors[0].Message)
	}
	if s, _, _ := e.raw(http.MethodGet, "/readyz", "", nil, nil); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with PostgreSQL unreachable: HTTP %d, want 503", s)
	}
	// A session is checked against the database: 503 UNAVAILABLE.
	if r := e.do(cred{Bearer: token}, `{me{id}}`, nil); r.Status != http.StatusServiceUnavailable || r.Code() != string(btk.CodeUnavailable) {
		t.Fatalf("session request with PostgreSQL unreachable: HTTP %d %+v, want 503 UNAVAILABLE", r.Status, r.Errors)
	}

	relay.Restore()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _, _ := e.raw(http.MethodGet, "/readyz", "", nil, nil)
		if s == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after PostgreSQL came back: HTTP %d", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := login(); r.Code() != "" {
		t.Fatalf("login after PostgreSQL came back: %+v", r.Errors)
	}
}

func hostOf(t *testing.T, url string) string {
	t.Helper()
	_, rest, _ := strings.Cut(url, "://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	host, _, _ := strings.Cut(rest, "/")
	if !strings.Contains(host, ":") {
		host += ":5432"
	}
	if !postgres.IsURL(url) || host == "" {
		t.Fatalf("cannot find the host of %s", pgtest.Env)
	}
	return host
}
