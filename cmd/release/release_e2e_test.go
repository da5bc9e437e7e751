//go:build e2e

package main

import (
	"bytes"
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A release built for linux/amd64, under -tags e2e (.ci/run): a cold cross build takes minutes on
// two cores, too long for go test ./... (whose TestTheImageRunsTheBinaryAsBinderyServe… checks
// the image and the sums around a stand-in binary). The other platforms go through the same code
// with another GOOS/GOARCH. The install rehearsal (internal/ops/rehearsal) builds the release
// again, with the commands of docs/install.md.
func TestTheReleaseShipsAStampedStaticBinaryAndAnImageThatRunsIt(t *testing.T) {
	out := t.TempDir()
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	var log bytes.Buffer
	a, err := Build(context.Background(), Options{Out: out, Version: "v9.8.7-test", Platforms: []string{"linux/amd64"},
		CACerts: "/etc/ssl/certs/ca-certificates.crt", Source: "../..", BuildTime: at, Log: &log})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	bin := filepath.Join(out, a.Binaries["linux/amd64"])

	t.Run("the binary is static", func(t *testing.T) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatal("the binary asks for a dynamic loader (PT_INTERP): not built with CGO_ENABLED=0")
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Fatalf("the binary needs shared libraries %v", libs)
		}
	})

	t.Run("bindery version names the release, its commit and when it was built", func(t *testing.T) {
		got, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("version: %v\n%s", err, got)
		}
		head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatalf("git rev-parse: %v", err)
		}
		for _, want := range []string{"bindery v9.8.7-test", "commit:   " + strings.TrimSpace(string(head)), "built:    2025-03-04T05:06:07Z", "go:       go1", "linux/amd64"} {
			if !strings.Contains(string(got), want) {
				t.Errorf("bindery version lacks %q:\n%s", want, got)
			}
		}
		if strings.Contains(string(got), "unknown") || strings.Contains(string(got), "not a release") {
			t.Errorf("a release build says it lacks a stamp:\n%s", got)
		}
	})

	t.Run("SHA256SUMS verifies every artifact", func(t *testing.T) {
		checkSums(t, out, []string{ImageFile, a.Binaries["linux/amd64"]})
	})

	t.Run("the image runs the built binary as bindery serve, not as root, with a /data volume", func(t *testing.T) {
		checkImage(t, filepath.Join(out, ImageFile), bin)
	})
}
