// Package chaos holds the multi-process reliability test (RELIABILITY.md; issue 8): the built
// binary as `bindery sim` plus three `bindery serve` instances on one MariaDB database, behind
// a round-robin proxy, under load from many simulated users with the simulators' faults on, while
// instances are killed with SIGKILL and restarted; then the faults are turned off, the system
// drains, and the invariants are re-checked in SQL and against the simulated GitLab.
//
// go test ./internal/chaos runs the short version (a few hundred applications, a few kills);
// go test -tags chaos ./internal/chaos -timeout 60m runs the long one. Both take their parameters from
// BINDERY_CHAOS_* environment variables (see params_test.go).
package chaos
