#!/usr/bin/env bash
# Build Prometheus from the github.com/prometheus/prometheus Go module into
# <repo>/.cache/prometheus/<version>/bin, once; print the binary's path. Debian's package is built
# without Kubernetes service discovery, which the local cluster's pod scraping needs; this build
# keeps only that one (build tags remove_all_sd,enable_kubernetes_sd) and no web UI assets (the
# HTTP API is what KEDA and the tests use). Used by scripts/local-k8s.sh.
set -euo pipefail
PROMETHEUS_VERSION="${FRAMEBUS_PROMETHEUS_VERSION:-v0.313.5}"  # the module's name for 3.13.5
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${repo_root}/.cache/prometheus/${PROMETHEUS_VERSION}"
if [[ -x "${out}/bin/prometheus" ]]; then echo "${out}/bin/prometheus"; exit 0; fi
# shellcheck source=scripts/go-module-build.sh
source "${repo_root}/scripts/go-module-build.sh"
release="3.${PROMETHEUS_VERSION#v0.}"; release="${release:0:2}${release:3}"
module_source github.com/prometheus/prometheus "${PROMETHEUS_VERSION}" "${out}"
build_commands "${out}" "-s -w -X github.com/prometheus/common/version.Version=${release}" \
    "remove_all_sd,enable_kubernetes_sd" prometheus=./cmd/prometheus
rm -rf "${out}/src"
echo "${out}/bin/prometheus"
