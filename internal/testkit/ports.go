package testkit

import (
	"testing"

	"bindery/internal/testkit/proc"
)

// FreeAddr is a free loopback address (127.0.0.1:port) for a server the test starts in another
// process or binds itself later. Another process may take the port first; the server then fails
// loudly when it cannot listen. A server in the test's own process listens on 127.0.0.1:0 instead.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return addr
}
