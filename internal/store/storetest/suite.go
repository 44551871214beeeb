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

// tests is every conformance test; each gets a store of its own.
var tests = []struct {
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
	{"AccountLifecycle", testAccountLifecycle},
	{"TimesComeBackUTC", testTimesComeBackUTC},
	{"APIKeyRoundTrip", testAPIKeyRoundTrip},
	{"APIKeyNameUniqueAmongActive", testAPIKeyNameUniqueAmongActive},
	{"APIKeyNameRace", testAPIKeyNameRace},
	{"APIKeyNameRaceWithoutCheck", testAPIKeyNameRaceWithoutCheck},
	{"RevokeAPIKey", testRevokeAPIKey},
	{"RevokeAllAPIKeys", testRevokeAllAPIKeys},
	{"APIKeysPaging", testAPIKeysPaging},
	{"BadCursor", testBadCursor},
	{"RecordUsage", testRecordUsage},
	{"RecordUsageBatches", testRecordUsageBatches},
	{"RecordUsageConcurrentOrders", testRecordUsageConcurrentOrders},
	{"UsageCountsAdd", testUsageCountsAdd},
	{"UsageCountsConcurrent", testUsageCountsConcurrent},
	{"UsageSeriesAndTopKeys", testUsageSeriesAndTopKeys},
	{"KeyClientLatestWins", testKeyClientLatestWins},
	{"PruneUsage", testPruneUsage},
	{"PruneDeliveries", testPruneDeliveries},
	{"WebhookClaimsFair", testWebhookClaimsFair},
	{"AuditRoundTrip", testAuditRoundTrip},
	{"AuditFilters", testAuditFilters},
	{"AuditPaging", testAuditPaging},
	{"EventAuditFilters", testEventAuditFilters},
	{"AccountsAndWorkspaceMembers", testAccountsAndWorkspaceMembers},
	{"ForeignKeysEnforced", testForeignKeysEnforced},
	{"WriteRollsBackOnError", testWriteRollsBackOnError},
	{"WriteRollsBackOnPanic", testWriteRollsBackOnPanic},
	{"ReadRefusesWrites", testReadRefusesWrites},
	{"Ping", testPing},
	{"TimeOutOfRange", testTimeOutOfRange},
	{"UnknownConstraintIsInternal", testUnknownConstraintIsInternal},
	{"ConcurrentReadsAndWrites", testConcurrentReadsAndWrites},
	// Rules that read and then write, under concurrent writers.
	{"ConcurrentRevokeSameKey", testConcurrentRevokeSameKey},
	{"ConcurrentRotateSameKey", testConcurrentRotateSameKey},
	{"RevokeAllRacesRotations", testRevokeAllRacesRotations},
	{"ConcurrentWorkspaceUpdates", testConcurrentWorkspaceUpdates},
	{"BootstrapOnce", testBootstrapOnce},
	{"SettingMadeOnce", testSettingMadeOnce},
	// The event stream (docs/webhooks.md).
	{"AuditChain", testAuditChain},
	{"AuditChainConcurrent", testAuditChainConcurrent},
	{"WebhookOutbox", testWebhookOutbox},
	{"WebhookClaimsConcurrent", testWebhookClaimsConcurrent},
	{"ExpiryNotices", testExpiryNotices},
	{"CanaryMarkOncePerWindow", testCanaryMarkOncePerWindow},
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
	for _, tc := range tests {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
		})
	}
	wg.Wait()
}
