// Package storetest is the one conformance suite every btk.Store passes:
// each engine's tests call Run with a function that opens a fresh, empty
// store of that engine.
package storetest

import (
	"sync"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// Opener opens a fresh, empty store for t and closes it when t ends.
type Opener func(t *testing.T) btk.Store

// storeTests are the conformance tests that each get a store of their own.
var storeTests = []struct {
	name string
	fn   func(*testing.T, btk.Store)
}{
	{"EmptyAndSettings", testEmptyAndSettings},
	{"WorkspaceRoundTrip", testWorkspaceRoundTrip},
	{"WorkspacesOldestFirstAndUpdate", testWorkspacesOldestFirstAndUpdate},
	{"PrefixTaken", testPrefixTaken},
	{"AccountRoundTripAndEmail", testAccountRoundTripAndEmail},
	{"Memberships", testMemberships},
	{"SessionRoundTripAndRevoke", testSessionRoundTripAndRevoke},
	{"ConcurrentEndSession", testConcurrentEndSession},
	{"PruneSessions", testPruneSessions},
	{"TimesComeBackUTC", testTimesComeBackUTC},
	{"WebhookClaimsFair", testWebhookClaimsFair},
	{"ForeignKeysEnforced", testForeignKeysEnforced},
	{"WriteRollsBackOnPanic", testWriteRollsBackOnPanic},
	{"Ping", testPing},
	{"BootstrapOnce", testBootstrapOnce},
	{"SettingMadeOnce", testSettingMadeOnce},
	{"CanaryMarkOncePerWindow", testCanaryMarkOncePerWindow},
}

// workspaceTests are the conformance tests of one workspace: each gets a store
// of its own with a workspace in it (plan CLOUD_PRO, see newWorkspace) and
// makes any other it needs.
var workspaceTests = []struct {
	name string
	fn   func(*testing.T, btk.Store, *btk.Workspace)
}{
	{"AccountLifecycle", testAccountLifecycle},
	{"APIKeyRoundTrip", testAPIKeyRoundTrip},
	{"APIKeyNameUniqueAmongActive", testAPIKeyNameUniqueAmongActive},
	{"APIKeyNameRace", testAPIKeyNameRace},
	{"APIKeyNameRaceWithoutCheck", testAPIKeyNameRaceWithoutCheck},
	{"RevokeAPIKey", testRevokeAPIKey},
	{"RevokeAllAPIKeys", testRevokeAllAPIKeys},
	{"CountActiveAPIKeys", testCountActiveAPIKeys},
	{"APIKeysPaging", testAPIKeysPaging},
	{"BadCursor", testBadCursor},
	{"RecordUsage", testRecordUsage},
	{"RecordUsageBatches", testRecordUsageBatches},
	{"RecordUsageConcurrentOrders", testRecordUsageConcurrentOrders},
	{"UsageCountsAdd", testUsageCountsAdd},
	{"UsageCountsConcurrent", testUsageCountsConcurrent},
	{"UsageSeriesAndTopKeys", testUsageSeriesAndTopKeys},
	{"UsageReadBack", testUsageReadBack},
	{"KeyClientLatestWins", testKeyClientLatestWins},
	{"KeyClientsOfPage", testKeyClientsOfPage},
	{"KeyUsageSeriesOfPage", testKeyUsageSeriesOfPage},
	{"RotationChain", testRotationChain},
	{"PruneUsage", testPruneUsage},
	{"UsageFlushCountedOnce", testUsageFlushCountedOnce},
	{"PruneDeliveries", testPruneDeliveries},
	{"AuditRoundTrip", testAuditRoundTrip},
	{"AuditFilters", testAuditFilters},
	{"AuditKeyRevokedAll", testAuditKeyRevokedAll},
	{"AuditPaging", testAuditPaging},
	{"EventAuditFilters", testEventAuditFilters},
	{"AccountsAndWorkspaceMembers", testAccountsAndWorkspaceMembers},
	{"WriteRollsBackOnError", testWriteRollsBackOnError},
	{"ReadRefusesWrites", testReadRefusesWrites},
	{"TimeOutOfRange", testTimeOutOfRange},
	{"UnknownConstraintIsInternal", testUnknownConstraintIsInternal},
	{"ConcurrentReadsAndWrites", testConcurrentReadsAndWrites},
	// Rules that read and then write, under concurrent writers.
	{"ConcurrentRevokeSameKey", testConcurrentRevokeSameKey},
	{"ConcurrentRotateSameKey", testConcurrentRotateSameKey},
	{"RevokeAllRacesRotations", testRevokeAllRacesRotations},
	{"ConcurrentWorkspaceUpdates", testConcurrentWorkspaceUpdates},
	// The event stream (docs/webhooks.md).
	{"AuditChain", testAuditChain},
	{"AuditChainConcurrent", testAuditChainConcurrent},
	{"AuditEventRacesWorkspaceLock", testAuditEventRacesWorkspaceLock},
	{"WebhookOutbox", testWebhookOutbox},
	{"WebhookClaimsConcurrent", testWebhookClaimsConcurrent},
	{"WebhookClaimsFairInWorkspace", testWebhookClaimsFairInWorkspace},
	{"WebhookBacklogBounded", testWebhookBacklogBounded},
	{"WebhookBacklogCounted", testWebhookBacklogCounted},
	{"DeleteWebhookRacesEvents", testDeleteWebhookRacesEvents},
	{"WebhookOutcomesRaceEvents", testWebhookOutcomesRaceEvents},
	{"DeleteWebhookRacesOutcomes", testDeleteWebhookRacesOutcomes},
	{"ExpiryNotices", testExpiryNotices},
	{"APIKeyNetworksAndUpdate", testAPIKeyNetworksAndUpdate},
	{"WorkspaceKeyPolicy", testWorkspaceKeyPolicy},
	{"RevokeUnusedOnce", testRevokeUnusedOnce},
}

// Run runs the conformance suite, each test on a store of its own from
// open. Up to eight run at once, whatever -parallel says: a store test
// mostly waits for its database (a PostgreSQL schema is migrated per test).
func Run(t *testing.T, open Opener) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	run := func(name string, fn func(*testing.T, btk.Store)) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(name, func(t *testing.T) { fn(t, open(t)) })
		})
	}
	for _, tc := range storeTests {
		run(tc.name, tc.fn)
	}
	for _, tc := range workspaceTests {
		run(tc.name, func(t *testing.T, db btk.Store) { tc.fn(t, db, newWorkspace(t, db)) })
	}
	wg.Wait()
}
