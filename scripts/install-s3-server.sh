#!/usr/bin/env bash
# Build the real S3-compatible server the clips tests upload to, versitygw (Apache-2.0; an S3
# gateway over a POSIX folder), from its Go module into <repo>/.cache/bin and print its path.
#
# tests/integration/s3server.py starts it on a free port over a temporary folder.
# Idempotent: when .cache/bin/versitygw already reports VERSITYGW_VERSION the build is skipped.
# A cold build takes about 1.5 minutes on 2 cores.
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/go-tool.sh
source "${repo_root}/scripts/go-tool.sh"

# `versitygw --version` prints "Version  : v1.8.0" among other lines.
reported="$("${repo_root}/.cache/bin/versitygw" --version 2>/dev/null |
    sed -nE 's/^Version[[:space:]]*:[[:space:]]*(v[^[:space:]]+).*/\1/p' || true)"
# main.Version is what `--version` reports (versitygw's own Makefile sets it the same way), so
# the skip check works.
build_go_tool versitygw "${VERSITYGW_VERSION}" "${reported}" \
    github.com/versity/versitygw/cmd/versitygw "-s -w -X main.Version=${VERSITYGW_VERSION}"
