#!/usr/bin/env bash
# Release builds: static fenceq binaries for the targets below, each packed
# with README.md and LICENSE as fenceq-VERSION-OS-ARCH.tar.gz, and
# SHA256SUMS over the archives.
#
#   scripts/release.sh [OUTDIR]          (default: dist)
#
#   VERSION=v1.2.3   the version stamped into the binaries and named in the
#                    archives (default: git describe --tags --always)
#   TARGETS="linux/amd64 linux/arm/7"   a subset (default: all four)
#   ALLOW_DIRTY=1    build from a work tree with uncommitted changes (the
#                    version then ends in -dirty; such builds are not releases)
#
# Reproducible: the same commit built with the same Go toolchain gives the
# same bytes whatever the clone's path, the build cache, the umask or the
# time of day (-trimpath; the commit is stamped with -X rather than read by
# the go command; tar with a fixed order, the commit's time as every mtime,
# owner 0:0 and fixed modes; gzip -n keeps no name or time).
# scripts/repro-check.sh proves it on two fresh clones.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-dist}
targets=${TARGETS:-linux/amd64 linux/arm64 linux/arm/7 darwin/arm64}

if [[ -n $(git status --porcelain) ]]; then
  if [[ ${ALLOW_DIRTY:-} != 1 ]]; then
    echo "release: the work tree has uncommitted changes; commit them (or set ALLOW_DIRTY=1 for a test build)" >&2
    exit 1
  fi
  dirty=-dirty
fi
commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
ctime=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
version=${VERSION:-$(git describe --tags --always --abbrev=12 HEAD)}${dirty:-}

# Nothing from the caller's environment may reach the build: GOFLAGS could
# carry -ldflags or -tags, and the GOAMD64/GOARM64 levels change the code.
export GOFLAGS= CGO_ENABLED=0 GOAMD64=v1 GOARM64=v8.0 GOTOOLCHAIN=local LC_ALL=C TZ=UTC
umask 022
pkg=github.com/fenceq/fenceq/internal/buildinfo
ldflags="-s -w -X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.commitTime=$ctime"

mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
archives=()
echo "release: fenceq $version, commit $commit ($ctime), $(go version | cut -d' ' -f3)"
for t in $targets; do
  IFS=/ read -r goos goarch goarm <<<"$t"
  arch=$goarch${goarm:+v$goarm}
  name=fenceq-$version-$goos-$arch
  mkdir -p "$stage/$name"
  GOOS=$goos GOARCH=$goarch GOARM=$goarm \
    go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$stage/$name/fenceq" .
  cp README.md LICENSE "$stage/$name/"
  tar --create --format=gnu --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    --mode=u=rwX,go=rX --directory="$stage" "$name" | gzip -n -9 >"$out/$name.tar.gz"
  archives+=("$name.tar.gz")
  echo "release: $out/$name.tar.gz"
done
(cd "$out" && sha256sum "${archives[@]}" >SHA256SUMS)
echo "release: $out/SHA256SUMS"
cat "$out/SHA256SUMS"
