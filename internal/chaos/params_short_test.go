//go:build e2e && !chaos

package chaos

// The short run of go test ./... (CI): 150 applications over 20 s with every fault on, and
// three kills, one every 5 s on average — each path the long run takes, a few times, in about
// 45 s on a 2-core machine (the long run and BINDERY_CHAOS_* give the numbers).
var defaults = params{
	apps:       150,
	users:      30,
	kills:      3,
	load:       "20s",
	drain:      "120s",
	killEvery:  "5s",
	opsRetries: 20,
	projects:   4,
	pipeline:   "2s",
}
