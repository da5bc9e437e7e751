package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// A release built for linux/amd64 (the other platforms go through the same code with another
// GOOS/GOARCH; building all four here would double the suite's time for no new check).
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
		sums, err := os.ReadFile(filepath.Join(out, SumsFile))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
			sum, name, ok := strings.Cut(line, "  ")
			if !ok {
				t.Fatalf("line %q is not '<sha256>  <name>'", line)
			}
			if got := fileSum(t, filepath.Join(out, name)); got != sum {
				t.Errorf("%s: SHA256SUMS says %s, the file is %s", name, sum, got)
			}
			names = append(names, name)
		}
		if want := []string{"bindery-image.oci.tar", "bindery-linux-amd64"}; !slices.Equal(names, want) {
			t.Errorf("SHA256SUMS lists %v, want %v", names, want)
		}
		if path, err := exec.LookPath("sha256sum"); err == nil {
			cmd := exec.Command(path, "-c", SumsFile)
			cmd.Dir = out
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("sha256sum -c: %v\n%s", err, b)
			}
		}
	})

	t.Run("the image runs the built binary as bindery serve, not as root, with a /data volume", func(t *testing.T) {
		dir := t.TempDir()
		untar(t, filepath.Join(out, ImageFile), dir)
		idx, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			t.Fatalf("read OCI layout: %v", err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.String() != "linux/amd64" {
			t.Fatalf("index manifests: %+v, want one for linux/amd64", im.Manifests)
		}
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if c.User != "65532:65532" {
			t.Errorf("user %q, want 65532:65532 (not root)", c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/bindery", "serve"}) {
			t.Errorf("entrypoint %q", c.Entrypoint)
		}
		if _, ok := c.Volumes["/data"]; !ok {
			t.Errorf("volumes %v lack /data", c.Volumes)
		}
		if cf.OS != "linux" || cf.Architecture != "amd64" {
			t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%d layers, want 2 (base: CA certificates, account, /data; then the binary)", len(layers))
		}
		base := layerFiles(t, layers[0])
		if _, ok := base["etc/ssl/certs/ca-certificates.crt"]; !ok {
			t.Error("the base layer has no CA certificates")
		}
		if h, ok := base["data/"]; !ok || h.Uid != 65532 || h.Typeflag != tar.TypeDir {
			t.Errorf("/data in the base layer: %+v, want a directory owned by 65532", h)
		}
		app := layerFiles(t, layers[1])
		h, ok := app["usr/local/bin/bindery"]
		if !ok {
			t.Fatalf("the second layer holds %v, not usr/local/bin/bindery", keys(app))
		}
		if h.Mode&0o111 == 0 {
			t.Errorf("the binary in the image is not executable: mode %o", h.Mode)
		}
		if got, want := layerFileSum(t, layers[1], "usr/local/bin/bindery"), fileSum(t, bin); got != want {
			t.Errorf("the binary in the image (sha256 %s) is not the one built (%s)", got, want)
		}
	})
}

func TestAReleaseRefusesAnUnknownPlatform(t *testing.T) {
	_, err := Build(context.Background(), Options{Out: t.TempDir(), Version: "v1", Platforms: []string{"plan9/386"}, Log: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "linux/amd64") {
		t.Fatalf("err %v, want the platforms it knows named", err)
	}
}

func TestAReleaseWithoutCACertificatesSaysWhereToGetThem(t *testing.T) {
	err := writeImage(Options{CACerts: filepath.Join(t.TempDir(), "none.crt")}, map[string]string{"linux/amd64": "x"}, filepath.Join(t.TempDir(), "i.tar"))
	if err == nil || !strings.Contains(err.Error(), "ca-certificates") {
		t.Fatalf("err %v, want the CA bundle's source named", err)
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sumHex(b)
}

func sumHex(b []byte) string {
	h := sha256.Sum256(b)
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 64)
	for _, c := range h {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func layerFiles(t *testing.T, l v1.Layer) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func layerFileSum(t *testing.T, l v1.Layer, name string) string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the layer: %v", name, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return sumHex(b)
		}
	}
}

func keys(m map[string]*tar.Header) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
