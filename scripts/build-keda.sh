#!/usr/bin/env bash
# Build KEDA's operator and metrics API server from the github.com/kedacore/keda/v2 Go module
# into <repo>/.cache/keda/<version>/bin, once, and keep its CRDs beside them (crd/); print the
# folder. Used by scripts/local-k8s.sh.
set -euo pipefail
KEDA_VERSION="${FRAMEBUS_KEDA_VERSION:-v2.20.2}"  # v2.21 needs Go 1.27.4
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${repo_root}/.cache/keda/${KEDA_VERSION}"
if [[ -x "${out}/bin/keda-operator" && -x "${out}/bin/keda-adapter" && -d "${out}/crd" ]]; then
    echo "${out}"; exit 0
fi
# shellcheck source=scripts/go-module-build.sh
source "${repo_root}/scripts/go-module-build.sh"
version_pkg=github.com/kedacore/keda/v2/version
module_source github.com/kedacore/keda/v2 "${KEDA_VERSION}" "${out}"
build_commands "${out}" "-s -w -X ${version_pkg}.Version=${KEDA_VERSION#v} -X ${version_pkg}.GitCommit=module" "" \
    keda-operator=./cmd/operator keda-adapter=./cmd/adapter
rm -rf "${out}/crd" && cp -r "${out}/src/config/crd/bases" "${out}/crd"
echo "${out}"
