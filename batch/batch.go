// Package batch runs the approval-first flow's batches: rounds per partition (cron on every
// instance and the operators' trigger run the same code), the claim through the store, and the
// batch runner that takes the members' file actions through one MR (package change), records
// progress with bulk member transitions, settles, bisects a deterministically failing batch, and
// sweeps batches whose lease expired.
package batch

import "bindery/store"

// Outcome is what one partition's round did.
type Outcome struct {
	Partition string
	Result    store.RoundOutcome // CLAIMED, SLOT_OCCUPIED, NOTHING_WAITING
	BatchID   int64              // set when CLAIMED
	Claimed   int                // members claimed
	Err       error              // the round failed for this partition (others still ran)
}
