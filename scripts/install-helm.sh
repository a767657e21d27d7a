#!/usr/bin/env bash
# Build the real helm CLI from its Go module into <repo>/.cache/bin and print its path.
#
# The deploy tests (tests/deploy) run `helm lint` and `helm template` with it.
# Idempotent: when .cache/bin/helm already reports HELM_VERSION the build is skipped.
# A cold build takes several minutes on 2 cores.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.0}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/go-tool.sh
source "${repo_root}/scripts/go-tool.sh"

reported="$("${repo_root}/.cache/bin/helm" version --template '{{.Version}}' 2>/dev/null || true)"
# The ldflags are the ones helm's own Makefile sets for a release: the version (so the skip
# check works) and the Kubernetes version that `helm template` and `helm lint` assume (1.34 for
# helm v3.19's client-go v0.34; the stock default would be 1.20).
K8S_MAJOR="${HELM_K8S_MAJOR:-1}"
K8S_MINOR="${HELM_K8S_MINOR:-34}"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=${K8S_MAJOR} -X ${pkg}.k8sVersionMinor=${K8S_MINOR}"
done
build_go_tool helm "${HELM_VERSION}" "${reported}" helm.sh/helm/v3/cmd/helm "${ldflags}"
