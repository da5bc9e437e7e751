//go:build !chaos

package chaos

// The short run of go test ./... (CI): a few hundred applications and a few kills, about two
// minutes on a 2-core machine.
var defaults = params{
	apps:       250,
	users:      50,
	kills:      3,
	load:       "40s",
	drain:      "120s",
	killEvery:  "10s",
	opsRetries: 20,
	projects:   4,
	pipeline:   "2s",
}
