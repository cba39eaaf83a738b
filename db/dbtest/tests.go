package dbtest

// tests lists the suite, file by file.
var tests = []test{
	// claim.go
	{"ClaimTakesHigherPriorityFirstAndFIFOWithinAPriority", testClaimTakesHigherPriorityFirstAndFIFOWithinAPriority},
	{"ClaimTakesTheOlderRunAtFirstWithinAPriority", testClaimTakesTheOlderRunAtFirstWithinAPriority},
	{"ClaimOfSeveralQueuesTakesTheBestJobOfAnyOfThem", testClaimOfSeveralQueuesTakesTheBestJobOfAnyOfThem},
	{"ADelayedJobIsClaimableOnlyOnceItsRunAtHasCome", testADelayedJobIsClaimableOnlyOnceItsRunAtHasCome},
	{"ADueScheduledJobCompetesByPriority", testADueScheduledJobCompetesByPriority},
	{"EnqueueWithAKnownIdempotencyKeyReturnsTheExistingJob", testEnqueueWithAKnownIdempotencyKeyReturnsTheExistingJob},
	{"AnExpiredClaimWithNoAttemptsLeftGoesDeadAndTheClaimTakesTheNextJob", testAnExpiredClaimWithNoAttemptsLeftGoesDeadAndTheClaimTakesTheNextJob},
	{"AnExpiredClaimWithNoAttemptsLeftGoesDeadEvenWhenNothingIsClaimed", testAnExpiredClaimWithNoAttemptsLeftGoesDeadEvenWhenNothingIsClaimed},
	{"ALeaseIsHeldUntilItsExpiryInstant", testALeaseIsHeldUntilItsExpiryInstant},
	{"ALateHeartbeatBeforeAnyReclaimIsAccepted", testALateHeartbeatBeforeAnyReclaimIsAccepted},
	{"ClaimWithMaxReturnsDistinctJobsEachWithItsOwnToken", testClaimWithMaxReturnsDistinctJobsEachWithItsOwnToken},
	{"EnqueueJobsWithOneInvalidRequestWritesNothing", testEnqueueJobsWithOneInvalidRequestWritesNothing},
	{"TheBackoffWithoutARetryDelayStaysWithinItsBounds", testTheBackoffWithoutARetryDelayStaysWithinItsBounds},
	// concurrency.go
	{"ConcurrentMutationsShareCommitsWithoutLosingOrLeakingChanges", testConcurrentMutationsShareCommitsWithoutLosingOrLeakingChanges},
	// fencing.go
	{"AClaimNumberFencesAStaleClaimantOfTheSameName", testAClaimNumberFencesAStaleClaimantOfTheSameName},
	// jobs.go
	{"EnqueueJobStoresAvailableOrScheduledJobs", testEnqueueJobStoresAvailableOrScheduledJobs},
	{"JobTransitions", testJobTransitions},
	{"RefusalsChangeNothing", testRefusalsChangeNothing},
	// linearizability.go
	{"Linearizable_ClaimsAndFencedCallsOnOneJob", testLinearizable_ClaimsAndFencedCallsOnOneJob},
	// model.go
	{"Model_StoreFollowsTheRules", testModel_StoreFollowsTheRules},
	// wait.go
	{"ClaimWaitIsWokenByAnEnqueueAndOneWaiterTakesEachJob", testClaimWaitIsWokenByAnEnqueueAndOneWaiterTakesEachJob},
	{"ClaimWaitEndsWhenItsContextIsCancelled", testClaimWaitEndsWhenItsContextIsCancelled},
	{"ClaimWaitIsWokenAtRunAtAndAtLeaseExpiry", testClaimWaitIsWokenAtRunAtAndAtLeaseExpiry},
	{"AnEmptyClaimCostsNoCommit", testAnEmptyClaimCostsNoCommit},
	{"CompleteAndClaimJobIsOneCommit", testCompleteAndClaimJobIsOneCommit},
	{"SweepDeletesFinishedJobsPastRetentionOnly", testSweepDeletesFinishedJobsPastRetentionOnly},
	{"AJobEnqueuedForAWaitingClaimIsHandedOffInOneCommit", testAJobEnqueuedForAWaitingClaimIsHandedOffInOneCommit},
}
