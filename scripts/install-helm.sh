#!/usr/bin/env bash
# Build the real helm CLI from its Go module into <repo>/.cache/bin and print its path.
#
# The deploy tests (tests/deploy) run `helm lint` and `helm template` with it. Building from
# source (not a downloaded release tarball) keeps CI on the package registries it can reach.
# Idempotent: when .cache/bin/helm already reports HELM_VERSION the build is skipped.
# A cold build takes several minutes on 2 cores.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.0}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${repo_root}/.cache/bin"
helm_bin="${bin_dir}/helm"

installed_version() {
    "${helm_bin}" version --template '{{.Version}}' 2>/dev/null || true
}

if [[ -x "${helm_bin}" && "$(installed_version)" == "${HELM_VERSION}" ]]; then
    echo "${helm_bin}"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "install-helm.sh: Go is not on PATH; install Go >= 1.24 to build helm ${HELM_VERSION}" >&2
    exit 1
fi

mkdir -p "${bin_dir}"
# `go install pkg@version` ignores any go.mod around it; -mod=mod keeps a stray GOFLAGS from
# forcing vendor mode. The ldflags are the ones helm's own Makefile sets for a release: the
# version (so the skip check above works) and the Kubernetes version that `helm template` and
# `helm lint` assume (1.34 for helm v3.19's client-go v0.34; the stock default would be 1.20).
K8S_MAJOR="${HELM_K8S_MAJOR:-1}"
K8S_MINOR="${HELM_K8S_MINOR:-34}"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=${K8S_MAJOR} -X ${pkg}.k8sVersionMinor=${K8S_MINOR}"
done
GOBIN="${bin_dir}" GOFLAGS="-mod=mod" CGO_ENABLED=0 \
    go install -ldflags "${ldflags}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2

echo "${helm_bin}"
