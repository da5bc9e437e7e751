//go:build chaos

package chaos

// The long run (go test -tags chaos ./internal/chaos -timeout 60m): thousands of applications, many kills.
var defaults = params{
	apps:       3000,
	users:      400,
	kills:      25,
	load:       "8m",
	drain:      "10m",
	killEvery:  "15s",
	opsRetries: 20,
	projects:   4,
	pipeline:   "2s",
}
