package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image, as ko builds one: no distribution underneath, only what a static Go binary needs.
const (
	// ImageBinary is where the binary lies in the image.
	ImageBinary = "/usr/local/bin/bindery"
	// ImageUser is the numeric user and group the image runs as: not root, and numeric so that
	// a runtime that refuses root images (runAsNonRoot) can check it without /etc/passwd.
	ImageUser = "65532:65532"
	// ImageData is the volume for a SQLite database and the configuration file.
	ImageData = "/data"
	// imageCA is where Go's crypto/x509 looks first on Linux.
	imageCA = "/etc/ssl/certs/ca-certificates.crt"
)

// writeImage builds one image per linux platform (binaries: platform → file) and writes them
// as an OCI image index into an OCI layout, packed as one tar file at out.
func writeImage(o Options, binaries map[string]string, out string) error {
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return fmt.Errorf("CA certificates for the image (-ca-certificates; Debian: apt-get install ca-certificates): %w", err)
	}
	base, err := baseLayer(ca, o.BuildTime)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	platforms := make([]string, 0, len(binaries))
	for p := range binaries {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	for _, p := range platforms {
		img, err := platformImage(o, base, p, binaries[p])
		if err != nil {
			return fmt.Errorf("image %s: %w", p, err)
		}
		goos, arch, _ := strings.Cut(p, "/")
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform:    &v1.Platform{OS: goos, Architecture: arch},
			Annotations: map[string]string{"org.opencontainers.image.version": o.Version},
		}})
	}
	dir, err := os.MkdirTemp("", "bindery-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	return tarDir(dir, out, o.BuildTime)
}

func platformImage(o Options, base v1.Layer, platform, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	app, err := layer(o.BuildTime, entry{name: ImageBinary, mode: 0o755, body: bin})
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, base, app); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	goos, arch, _ := strings.Cut(platform, "/")
	cf.OS, cf.Architecture = goos, arch
	cf.Created = v1.Time{Time: o.BuildTime}
	cf.Config = v1.Config{
		User:       ImageUser,
		Entrypoint: []string{ImageBinary, "serve"},
		Cmd:        []string{"-config", ImageData + "/config.yaml"},
		WorkingDir: ImageData,
		Volumes:    map[string]struct{}{ImageData: {}},
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + imageCA},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "bindery",
			"org.opencontainers.image.version": o.Version,
			"org.opencontainers.image.created": o.BuildTime.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

type entry struct {
	name string
	mode int64
	dir  bool
	uid  int
	body []byte
}

// baseLayer is what every image shares: the CA bundle, the non-root account (for tools that
// resolve names) and the data directory it owns.
func baseLayer(ca []byte, at time.Time) (v1.Layer, error) {
	return layer(at,
		entry{name: "/etc/ssl/certs/", mode: 0o755, dir: true},
		entry{name: imageCA, mode: 0o644, body: ca},
		entry{name: "/etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nbindery:x:65532:65532:bindery:/data:/sbin/nologin\n")},
		entry{name: "/etc/group", mode: 0o644, body: []byte("root:x:0:\nbindery:x:65532:\n")},
		entry{name: ImageData + "/", mode: 0o750, dir: true, uid: 65532},
		entry{name: "/tmp/", mode: 0o1777, dir: true},
	)
}

// layer packs entries as an OCI layer; every time is at, so one commit builds one digest.
func layer(at time.Time, entries ...entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, e := range entries {
		// Parent directories first, as a runtime unpacking in order expects.
		parts := strings.Split(strings.Trim(e.name, "/"), "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if !seen[d] {
				seen[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: at, Format: tar.FormatPAX}); err != nil {
					return nil, err
				}
			}
		}
		h := &tar.Header{Name: strings.TrimPrefix(e.name, "/"), Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: at, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
			if seen[h.Name] {
				continue
			}
			seen[h.Name] = true
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarDir packs an OCI layout directory into one tar file (oci-layout, index.json, blobs/…), the
// form `skopeo copy oci-archive:`, `podman load` and `crane push` take.
func tarDir(dir, out string, at time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: at})
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(body)), ModTime: at}); err != nil {
			return err
		}
		_, err = tw.Write(body)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeSums writes SHA256SUMS for files (names relative to dir), as sha256sum prints them.
func writeSums(dir string, files []string) error {
	var b strings.Builder
	for _, name := range files {
		if name == "" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
	}
	return os.WriteFile(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}
