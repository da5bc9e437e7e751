package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The hardening docs/install.md promises of deploy/systemd/bindery.service.
var hardening = []string{
	"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "DynamicUser=yes",
	"StateDirectory=bindery", "CapabilityBoundingSet=", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
	"SystemCallFilter=@system-service", "LoadCredential=config.yaml:/etc/bindery/config.yaml",
}

// systemd-analyze comes with Debian's systemd package (in the machine image CI runs on; .ci/run
// installs it otherwise and sets BINDERY_REQUIRE_SYSTEMD=1, so that a missing one fails there).
func TestTheSystemdUnitIsValidAndHardened(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/bindery.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range hardening {
		if !strings.Contains(string(unit), "\n"+want+"\n") {
			t.Errorf("the unit lacks %q", want)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("BINDERY_REQUIRE_SYSTEMD") == "1" {
			t.Fatal("systemd-analyze is required (BINDERY_REQUIRE_SYSTEMD=1) but not installed: apt-get install systemd")
		}
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the unit's directives were checked, systemd's verification did not run")
	}
	// verify checks that ExecStart's program exists: the unit as shipped, its program replaced
	// by one that exists here (the binary is installed only on the target host).
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "bindery.service")
	if err := os.WriteFile(copied, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/bindery", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", copied).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// systemd's own exposure score, 0 (locked down) to 10 (unprotected): the unit must stay below
	// 2 ("OK"); a directive dropped by mistake raises it past that.
	if out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", copied).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (%v)\n%s", err, out)
	}
}
