// Package buildinfo says which fenceq this is: the version, the commit and
// the Go toolchain that built it, from the build information the go command
// embeds (runtime/debug.ReadBuildInfo). Release builds (scripts/release.sh)
// stamp the version and the commit with the linker:
//
//	go build -ldflags "-X github.com/fenceq/fenceq/internal/buildinfo.version=v1.2.3
//	    -X github.com/fenceq/fenceq/internal/buildinfo.commit=$(git rev-parse HEAD)"
//
// A stamped commit does not depend on the go command finding the
// repository: it finds none in a git worktree, a tarball or with
// -buildvcs=false, and its vcs.modified counts untracked files.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by release builds with -ldflags -X (scripts/release.sh).
var (
	version    string
	commit     string
	commitTime string // RFC 3339
)

// Source is the release the source of this build becomes: the version a
// build from a clone (without a stamped release version) writes as, held
// against a PostgreSQL database's minimum writer version. It is raised
// when a release is tagged (docs/releases.tsv, CHANGELOG.md).
const Source = "v0.2.0"

// WriterVersion is the release version this build writes to a database
// as: the stamped version when it is a release (vMAJOR.MINOR.PATCH and
// nothing after), else Source.
func WriterVersion() string {
	if isRelease(version) {
		return version
	}
	return Source
}

func isRelease(v string) bool {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if !strings.HasPrefix(v, "v") || len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// Info describes the running binary.
type Info struct {
	// Version is the stamped release version; without a stamp, the main
	// module's version from the build info ("(devel)" for a build in a
	// clone, the module version for "go install …@vX").
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, "" when the
	// build had no VCS information (-buildvcs=false, a build outside a clone).
	Commit string `json:"commit"`
	// CommitTime is the revision's commit time (RFC 3339), "" when unknown.
	CommitTime string `json:"commit_time,omitempty"`
	// Modified reports a build from a work tree with uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH, with the ARM level for 32-bit ARM (linux/arm/v7).
	Platform string `json:"platform"`
}

// Read returns the running binary's Info.
func Read() Info {
	info := Info{Version: version, Commit: commit, CommitTime: commitTime,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	stamped := commit != ""
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "unknown"
		}
		return info
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if !stamped {
				info.Commit = s.Value
			}
		case "vcs.time":
			if !stamped {
				info.CommitTime = s.Value
			}
		case "vcs.modified":
			info.Modified = !stamped && s.Value == "true"
		case "GOARM":
			info.Platform += "/v" + s.Value
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// String is the one-line form "fenceq VERSION (commit COMMIT[, modified]) GOVERSION PLATFORM".
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += ", modified"
	}
	return fmt.Sprintf("fenceq %s (commit %s) %s %s", i.Version, commit, i.GoVersion, i.Platform)
}
