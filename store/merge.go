package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MergeRecord is one MR that landed on its target branch, as GitLab said when bindery saw it
// merged: the place in the project's merge order that a deploy of it, or of a later merge,
// proves deployed (docs/architecture.md, "Reconciliation").
type MergeRecord struct {
	Project  string
	MRIID    int64
	Branch   string    // the target branch
	SHA      string    // the commit the merge put on the branch ("" unknown)
	MergedAt time.Time // GitLab's time of the merge; zero: GitLab gave none, the merge is never placed
	Seq      int64     // the project's merge sequence, taken when recorded (read back only)
}

// RecordMerge records that m landed, in the transaction that records its requests MERGED (after
// merge_batch, before operation: the lock order), with the project's next merge sequence. An MR
// recorded already keeps its first record (a replayed settlement changes nothing).
func (tx *Tx) RecordMerge(ctx context.Context, m MergeRecord) error {
	if m.Project == "" || m.MRIID <= 0 {
		return fmt.Errorf("record merge: project %q, MR %d", m.Project, m.MRIID)
	}
	// A replay reads first so that it takes no sequence number (the counter row stays unlocked).
	var seen int
	err := tx.tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM mr_merge WHERE project = ? AND mr_iid = ?", m.Project, m.MRIID).Scan(&seen)
	if err != nil || seen > 0 {
		return translate(err)
	}
	// The counter row serialises the project's merges: the increment locks it until commit.
	upsert := "INSERT INTO merge_counter (project, seq) VALUES (?, 1) ON CONFLICT (project) DO UPDATE SET seq = seq + 1"
	if tx.db.dialect == MySQL {
		upsert = "INSERT INTO merge_counter (project, seq) VALUES (?, 1) ON DUPLICATE KEY UPDATE seq = seq + 1"
	}
	if _, err := tx.tx.ExecContext(ctx, upsert, m.Project); err != nil {
		return fmt.Errorf("merge sequence of %s: %w", m.Project, translate(err))
	}
	var seq int64
	if err := tx.tx.QueryRowContext(ctx, "SELECT seq FROM merge_counter WHERE project = ?", m.Project).Scan(&seq); err != nil {
		return fmt.Errorf("merge sequence of %s: %w", m.Project, translate(err))
	}
	var at any
	if !m.MergedAt.IsZero() {
		at = tx.db.timeArg(m.MergedAt)
	}
	_, err = tx.tx.ExecContext(ctx, "INSERT INTO mr_merge (project, mr_iid, seq, branch, sha, merged_at) VALUES (?, ?, ?, ?, ?, ?)",
		m.Project, m.MRIID, seq, m.Branch, m.SHA, at)
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return nil // recorded by a concurrent settler of the same MR
	}
	if err != nil {
		return fmt.Errorf("record merge %s!%d: %w", m.Project, m.MRIID, err)
	}
	return nil
}
