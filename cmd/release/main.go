// Command release builds bindery's release artifacts into one directory:
//
//	go run ./cmd/release [-out dist] [-version v1.2.3] [-platforms linux/amd64,…]
//
// For each platform a static binary (CGO_ENABLED=0) stamped with its version, commit and build
// time; for the linux platforms a container image, built without a Docker daemon (the way ko
// does: the binary as a layer on an empty base), written as one OCI layout tarball; and
// SHA256SUMS of every file. docs/install.md says how an operator verifies and runs them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Platforms are the GOOS/GOARCH pairs a release ships.
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/arm64", "windows/amd64"}

// ImageFile is the OCI layout tarball of the container image (every linux platform built).
const ImageFile = "bindery-image.oci.tar"

// SumsFile lists the SHA-256 of every artifact, in the format sha256sum -c reads.
const SumsFile = "SHA256SUMS"

// Options configure one release build.
type Options struct {
	Out       string   // directory of the artifacts (created; files of an earlier build replaced)
	Version   string   // "" → git describe --tags --always --dirty
	Platforms []string // GOOS/GOARCH, each one of Platforms
	CACerts   string   // the CA bundle copied into the image
	Source    string   // the module's directory (a git checkout)
	BuildTime time.Time
	Log       io.Writer

	commit   string // git rev-parse HEAD
	modified bool   // tracked files differ from the commit
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "dist", "directory of the artifacts")
	version := fs.String("version", "", "version to stamp (default: git describe --tags --always --dirty)")
	platforms := fs.String("platforms", strings.Join(Platforms, ","), "GOOS/GOARCH pairs to build, comma separated")
	ca := fs.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle put into the image (Debian: package ca-certificates)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o := Options{Out: *out, Version: *version, CACerts: *ca, Source: ".", BuildTime: buildTime(), Log: stderr}
	for _, p := range strings.Split(*platforms, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Platforms = append(o.Platforms, p)
		}
	}
	_, err := Build(ctx, o)
	return err
}

// buildTime is now, or SOURCE_DATE_EPOCH when set (a reproducible build pins it).
func buildTime() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}

// Artifacts are the files one build wrote, by name relative to Options.Out.
type Artifacts struct {
	Version  string
	Binaries map[string]string // platform → file name
	Image    string            // "" when no linux platform was built
	Sums     string
}

// Build writes the release into o.Out and returns what it wrote.
func Build(ctx context.Context, o Options) (Artifacts, error) {
	if len(o.Platforms) == 0 {
		return Artifacts{}, errors.New("no platform to build")
	}
	for _, p := range o.Platforms {
		if !slices.Contains(Platforms, p) {
			return Artifacts{}, fmt.Errorf("platform %q: want one of %s", p, strings.Join(Platforms, ", "))
		}
	}
	if o.Version == "" {
		v, err := git(ctx, o.Source, "describe", "--tags", "--always", "--dirty")
		if err != nil {
			return Artifacts{}, fmt.Errorf("%w (give -version when building outside a git checkout)", err)
		}
		o.Version = v
	}
	commit, err := git(ctx, o.Source, "rev-parse", "HEAD")
	if err != nil {
		return Artifacts{}, fmt.Errorf("%w: a release is built from a git checkout", err)
	}
	status, err := git(ctx, o.Source, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return Artifacts{}, err
	}
	o.commit, o.modified = commit, status != ""
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Artifacts{}, err
	}
	a := Artifacts{Version: o.Version, Binaries: map[string]string{}}
	images := map[string]string{} // linux platform → binary path
	for _, p := range o.Platforms {
		name := binaryName(p)
		fmt.Fprintf(o.Log, "building %s (%s)\n", name, o.Version)
		if err := buildBinary(ctx, o, p, filepath.Join(o.Out, name)); err != nil {
			return a, err
		}
		a.Binaries[p] = name
		if strings.HasPrefix(p, "linux/") {
			images[p] = filepath.Join(o.Out, name)
		}
	}
	if len(images) > 0 {
		fmt.Fprintf(o.Log, "writing %s\n", ImageFile)
		if err := writeImage(o, images, filepath.Join(o.Out, ImageFile)); err != nil {
			return a, err
		}
		a.Image = ImageFile
	}
	files := append(sortedValues(a.Binaries), a.Image)
	slices.Sort(files)
	if err := writeSums(o.Out, files); err != nil {
		return a, err
	}
	a.Sums = SumsFile
	fmt.Fprintf(o.Log, "release %s written to %s\n", o.Version, o.Out)
	return a, nil
}

// binaryName is bindery-GOOS-GOARCH, with .exe on Windows: names without the version, so the
// commands in docs/install.md work for every release.
func binaryName(platform string) string {
	name := "bindery-" + strings.ReplaceAll(platform, "/", "-")
	if strings.HasPrefix(platform, "windows/") {
		name += ".exe"
	}
	return name
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// buildBinary runs go build for one platform, stamped with -X: the version, the build time, the
// commit and whether the tree was modified (bindery version prints them). Go's own VCS stamping
// is asked for too (-buildvcs=true beats a GOFLAGS=-buildvcs=false), but it is not relied on:
// it stamps nothing in a git worktree.
func buildBinary(ctx context.Context, o Options, platform, out string) error {
	goos, goarch, _ := strings.Cut(platform, "/")
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	ldflags := fmt.Sprintf("-s -w -X bindery/internal/app.Version=%s -X bindery/internal/app.BuildTime=%s -X bindery/internal/app.Commit=%s -X bindery/internal/app.Modified=%t",
		o.Version, o.BuildTime.Format(time.RFC3339), o.commit, o.modified)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true", "-ldflags", ldflags, "-o", abs, ".")
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = o.Log, o.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", platform, err)
	}
	return nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}
