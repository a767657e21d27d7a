#!/usr/bin/env bash
# Sourced by install-helm.sh and install-s3-server.sh: build a Go tool at an exact version from
# its Go module into <repo>/.cache/bin and print its path, unless the binary there already
# reports that version. Building from source (not a downloaded release) keeps CI on the package
# registries it can reach.
#
# usage: build_go_tool <binary name> <version> <version the binary reports now, or ""> \
#                      <main package path> <ldflags>

build_go_tool() {
    local name=$1 version=$2 reported=$3 package=$4 ldflags=$5
    local repo_root bin_dir
    repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    bin_dir="${repo_root}/.cache/bin"
    if [[ -x "${bin_dir}/${name}" && "${reported}" == "${version}" ]]; then
        echo "${bin_dir}/${name}"
        return 0
    fi
    if ! command -v go >/dev/null 2>&1; then
        echo "Go is not on PATH; install Go >= 1.24 to build ${name} ${version}" >&2
        return 1
    fi
    mkdir -p "${bin_dir}"
    # `go install pkg@version` ignores any go.mod around it; -mod=mod keeps a stray GOFLAGS from
    # forcing vendor mode. nice: CI runs the build beside other work on 2 cores.
    GOBIN="${bin_dir}" GOFLAGS="-mod=mod" CGO_ENABLED=0 \
        nice go install -ldflags "${ldflags}" "${package}@${version}" >&2
    echo "${bin_dir}/${name}"
}
