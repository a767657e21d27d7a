#!/usr/bin/env bash
# Build Kubernetes' control-plane and node binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl; no kube-proxy, see local-k8s.sh) from the k8s.io/kubernetes
# Go module into <repo>/.cache/k8s/<version>/bin, once; print that folder. Used by local-k8s.sh.
#
# The module's zip leaves out staging/, which its go.mod replaces every k8s.io/* library with:
# each such replace becomes a require of the published module of the same minor version
# (k8s.io/api v0.34.x for Kubernetes v1.34.x). No release tarball or registry is needed.
set -euo pipefail
KUBE_VERSION="${FRAMEBUS_KUBE_VERSION:-v1.34.2}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${repo_root}/.cache/k8s/${KUBE_VERSION}"
commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

built=1
for name in "${commands[@]}"; do [[ -x "${out}/bin/${name}" ]] || built=0; done
if [[ "${built}" == 1 ]]; then echo "${out}/bin"; exit 0; fi
# shellcheck source=scripts/go-module-build.sh
source "${repo_root}/scripts/go-module-build.sh"
module_source k8s.io/kubernetes "${KUBE_VERSION}" "${out}"
cd "${out}/src"
# v1.34.2 -> v0.34.2: the staging libraries are published as v0.<minor>.<patch>.
staging_version="v0.${KUBE_VERSION#v1.}"
edits=()
while read -r module; do
    edits+=("-dropreplace=${module}" "-require=${module}@${staging_version}")
done < <(GOWORK=off go mod edit -json | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith("./staging/"):
        print(r["Old"]["Path"])')
[[ ${#edits[@]} -gt 0 ]] || { echo "build-k8s: no ./staging replaces found in go.mod" >&2; exit 1; }
GOWORK=off go mod edit "${edits[@]}"
version_pkg=k8s.io/component-base/version
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X ${version_pkg}.gitVersion=${KUBE_VERSION} -X ${version_pkg}.gitMajor=1 -X ${version_pkg}.gitMinor=${minor} -X ${version_pkg}.gitTreeState=clean"
targets=()
for name in "${commands[@]}"; do targets+=("${name}=./cmd/${name}"); done
build_commands "${out}" "${ldflags}" "" "${targets[@]}"
echo "${out}/bin"
