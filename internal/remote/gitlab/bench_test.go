package gitlab_test

import (
	"fmt"
	"strings"
	"testing"
)

// Cost of one guarded call (deadline, breaker, metrics, client-go) against the simulator over
// loopback HTTP, and of a whole approve step in each implementation.
//
//	go test ./internal/remote/gitlab -run '^$' -bench . -benchtime 2000x

func BenchmarkGetMergeRequest(b *testing.B) {
	bb := setup(b, "")
	mr := bb.openMR(b, "bench")
	b.ResetTimer()
	for b.Loop() {
		if _, err := bb.client.GetMergeRequest(ctx, project, mr.IID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApproveStep(b *testing.B) {
	for _, mode := range []string{"false", "true"} {
		b.Run("checklistMode="+mode, func(b *testing.B) {
			bb := setup(b, strings.Replace(baseConfig, "backoff: 1ms", "backoff: 1ms\n  checklistMode: "+mode, 1))
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				mr := bb.openMR(b, fmt.Sprintf("bench-%d", i))
				b.StartTimer()
				if err := bb.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
