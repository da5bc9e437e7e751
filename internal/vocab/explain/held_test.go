package explain

import "testing"

// An operator's sentence names each configuration key with its value in force.
func TestAnOperatorsSentenceSaysTheValuesOfTheKeysItNames(t *testing.T) {
	t.Parallel()
	values := map[string]string{"approval.pollAfter": "15m0s", "approval.timeout": "72h0m0s", "reconcile.deployOverdue": "10m0s", "batch.train": "3"}
	value := func(k string) (string, bool) { v, ok := values[k]; return v, ok }
	for in, want := range map[string]string{
		"Waits for the approvers; bindery reads the ticket every approval.pollAfter, and lists it once approval.timeout passed.": "Waits for the approvers; bindery reads the ticket every approval.pollAfter (15 min), and lists it once approval.timeout (72 h) passed.",
		"Its deploy callback is overdue (reconcile.deployOverdue): check it.":                                                    "Its deploy callback is overdue (reconcile.deployOverdue: 10 min): check it.",
		"A train of batch.train cars; poll.unknownKey stays.":                                                                    "A train of batch.train (3) cars; poll.unknownKey stays.",
		"No key here: example.com stays.":                                                                                        "No key here: example.com stays.",
	} {
		if got := WithValues(in, value); got != want {
			t.Errorf("%q\n got %q\nwant %q", in, got, want)
		}
	}
}
