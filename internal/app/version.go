package app

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is stamped at build time (-ldflags "-X bindery/internal/app.Version=…"); the release
// command (cmd/release) stamps it. "dev" means nobody did.
var Version = "dev"

// BuildTime is when the release command built the binary (RFC 3339), stamped the same way
// (-X bindery/internal/app.BuildTime=…); "" when nobody did.
var BuildTime = ""

// Commit and Modified are the git commit the release command built from and whether the tree
// had uncommitted changes ("true"), stamped the same way. Go's own VCS stamping says the same
// when it works; it does not in a git worktree or with GOFLAGS=-buildvcs=false, so the release
// command does not rely on it.
var (
	Commit   = ""
	Modified = ""
)

// Build describes the binary: what `bindery version` prints.
type Build struct {
	Version   string
	Commit    string // the git commit it was built from ("" when the build carries no VCS stamp)
	Modified  bool   // the working tree had uncommitted changes
	CommitAt  string // the commit's time, from the VCS stamp
	BuildTime string
	Go        string // toolchain version
	Platform  string // GOOS/GOARCH
}

// BuildInfo reads the stamps of this binary: Version, BuildTime, Commit and Modified from the
// linker, else the commit from Go's own VCS stamping (go build -buildvcs,
// runtime/debug.ReadBuildInfo). A plain go build with GOFLAGS=-buildvcs=false, in a git
// worktree or outside a git checkout carries no commit, and says so.
func BuildInfo() Build {
	b := Build{Version: Version, BuildTime: BuildTime, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			case "vcs.time":
				b.CommitAt = s.Value
			}
		}
	}
	if Commit != "" { // the release command's stamp: it knows even where Go's could not look
		b.Commit, b.Modified = Commit, Modified == "true"
	}
	return b
}

// String is the text of `bindery version`: one fact a line, and a plain sentence for each stamp
// the build lacks, so a binary of unknown origin says so instead of looking like a release.
func (b Build) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "bindery %s\n", b.Version)
	switch {
	case b.Commit == "":
		s.WriteString("  commit:   unknown (built without VCS stamping: go build -buildvcs=false, or outside a git checkout)\n")
	case b.Modified:
		fmt.Fprintf(&s, "  commit:   %s, with uncommitted changes (modified tree)\n", b.Commit)
	default:
		fmt.Fprintf(&s, "  commit:   %s (clean tree)\n", b.Commit)
	}
	if b.CommitAt != "" {
		fmt.Fprintf(&s, "  committed: %s\n", b.CommitAt)
	}
	if b.BuildTime != "" {
		fmt.Fprintf(&s, "  built:    %s\n", b.BuildTime)
	} else {
		s.WriteString("  built:    unknown (not stamped: build with go run ./cmd/release)\n")
	}
	fmt.Fprintf(&s, "  go:       %s %s\n", b.Go, b.Platform)
	if b.Version == "dev" {
		s.WriteString("  This is not a release build: its version was not stamped.\n")
	}
	return s.String()
}
