#!/usr/bin/env bash
# Build every image compose.yaml (with compose.local.yaml) and the chart run, on this machine,
# from Debian's packages and the package registries: no container registry is pulled from.
#
#   scripts/build-images.sh [--no-gpu] [--rebuild-base]        (make images)
#
#  1. framebus/base:bookworm: a Debian root filesystem made by mmdebstrap (python3, pip, venv),
#     imported into podman; made once, again with --rebuild-base.
#  2. framebus/kafka:4.1.1: deploy/kafka on that base, with Debian's Java 17 and the Apache Kafka
#     jars `framebus kafka` resolves from Maven Central (cached under FRAMEBUS_HOME).
#  3. framebus/rtsp-camera:dev: GStreamer's RTSP server from Debian's packages (deploy/rtsp-camera).
#  4. framebus/decoder:dev (every CPU service) and, unless --no-gpu, framebus/inferencer:dev (CUDA,
#     cuDNN and TensorRT from PyPI's wheels, about 4 GB), from their Dockerfiles with the base as
#     PYTHON_IMAGE.
#
# TensorRT: tensorrt-cu12-libs on PyPI downloads its wheel from NVIDIA's own index when installed;
# where that index is not reachable (as on the machines this project is built on), the GPU image
# is built without TensorRT unless FRAMEBUS_TENSORRT_VERSION names the version to install
# (10.9.0.34 goes with onnxruntime-gpu 1.22.0).
#
# Behind a TLS-intercepting proxy, builds trust the host's CA bundle: FRAMEBUS_BUILD_CA_BUNDLE
# (default /etc/ssl/certs/ca-certificates.crt, when it exists) is mounted read-only over the
# build's own bundle during RUN steps only; it is never part of an image.
#
# Needs podman, runc, mmdebstrap and Maven (installed here when run as root on Debian: see
# install_container_tools) and the project's venv (make install) for the Kafka jars.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
# shellcheck source=scripts/debian-packages.sh
source scripts/debian-packages.sh

gpu=1
rebuild_base=0
for arg in "$@"; do
    case "${arg}" in
        --no-gpu) gpu=0 ;;
        --rebuild-base) rebuild_base=1 ;;
        *) echo "build-images.sh: unknown argument ${arg}" >&2; exit 2 ;;
    esac
done

BASE_IMAGE=localhost/framebus/base:bookworm
KAFKA_IMAGE=localhost/framebus/kafka:4.1.1
PYTHON="${repo_root}/.venv/bin/python"
ca_bundle="${FRAMEBUS_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

# podman with runc: crun fails on this kind of VM ("setrlimit RLIMIT_NPROC"), and the default
# ulimits must not exceed the VM's own. netavark: the CNI plugins are not installed.
CONTAINERS_CONF_TEXT='[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
'

install_container_tools() {
    local need=()
    for pkg in podman runc mmdebstrap netavark aardvark-dns uidmap fuse-overlayfs; do
        dpkg -s "${pkg}" >/dev/null 2>&1 || need+=("${pkg}")
    done
    # Maven resolves the Kafka image's jars from Maven Central (as `framebus kafka` does).
    command -v mvn >/dev/null || need+=(maven)
    install_debian_packages build-images.sh "${need[@]}"
    local conf=/etc/containers/containers.conf
    if [[ ! -f "${conf}" ]]; then
        if [[ "$(id -u)" -ne 0 ]]; then
            echo "build-images.sh: ${conf} is missing; as root, write it with:" >&2
            echo "${CONTAINERS_CONF_TEXT}" >&2
            exit 1
        fi
        printf '%s' "${CONTAINERS_CONF_TEXT}" >"${conf}"
    fi
    local runtime
    runtime="$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null)"
    if [[ "${runtime}" != runc ]]; then
        echo "build-images.sh: podman's runtime is '${runtime}', not runc; set" \
            "[engine] runtime = \"runc\" in ${conf}" >&2
        exit 1
    fi
}

# podman build with the host's network (the registries' proxy) and its CA bundle.
build() {
    local args=(--network host)
    [[ -f "${ca_bundle}" ]] && args+=(-v "${ca_bundle}:/etc/ssl/certs/ca-certificates.crt:ro")
    podman build "${args[@]}" "$@"
}

# build TAG ARGS...: `build ARGS -t TAG`, then the image TAG named before, if it changed, removed
# (the GPU image's own layers are 4 GB). Not `podman image prune`: that also drops the builder
# stages' cached layers, and every build would start again from nothing.
build_tagged() {
    local tag=$1 old new
    shift
    old="$(podman image inspect --format '{{.Id}}' "${tag}" 2>/dev/null || true)"
    build -t "${tag}" "$@"
    new="$(podman image inspect --format '{{.Id}}' "${tag}")"
    if [[ -n "${old}" && "${old}" != "${new}" ]]; then
        podman rmi "${old}" >/dev/null 2>&1 ||
            echo "build-images.sh: kept the previous ${tag} (${old:0:12}): still in use" >&2
    fi
}

build_base() {
    if [[ "${rebuild_base}" -eq 0 ]] && podman image exists "${BASE_IMAGE}"; then
        return
    fi
    local tar
    tar="$(mktemp -d)/rootfs.tar"
    # --variant=apt: Debian's essential packages and apt; EXTERNALLY-MANAGED removed so pip may
    # install into the image's own Python, as on python:3.11-slim.
    mmdebstrap --quiet --variant=apt \
        --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates,passwd \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        bookworm "${tar}"
    podman import --change 'CMD ["python3"]' "${tar}" "${BASE_IMAGE}" >/dev/null
    rm -rf "$(dirname "${tar}")"
}

build_kafka() {
    local context libs
    context="$(mktemp -d)"
    libs="$("${PYTHON}" -c '
from framebus_tools.kafkajars import ensure_kafka_jars, kafka_libs_dir
from framebus_tools.localkafka import default_home
print(ensure_kafka_jars(kafka_libs_dir(default_home())))')"
    cp -r "${libs}" "${context}/libs"
    rm -f "${context}/libs/.complete"
    cp deploy/kafka/run.sh deploy/kafka/kafka-broker-api-versions.sh deploy/kafka/log4j2.xml \
        "${context}/"
    build_tagged "${KAFKA_IMAGE}" --build-arg "BASE_IMAGE=${BASE_IMAGE}" \
        -f deploy/kafka/Dockerfile "${context}"
    rm -rf "${context}"
}

[[ -x "${PYTHON}" ]] || { echo "build-images.sh: run \`make install\` first" >&2; exit 1; }
install_container_tools
started=${SECONDS}
step() { echo "[$((SECONDS - started)) s] $*" >&2; }

step "base image ${BASE_IMAGE}"
build_base
step "Kafka image ${KAFKA_IMAGE}"
build_kafka
step "camera image framebus/rtsp-camera:dev"
build_tagged localhost/framebus/rtsp-camera:dev --build-arg "BASE_IMAGE=${BASE_IMAGE}" \
    -f deploy/rtsp-camera/Dockerfile scripts/
step "framebus image framebus/decoder:dev"
build_tagged localhost/framebus/decoder:dev --build-arg "PYTHON_IMAGE=${BASE_IMAGE}" \
    -f services/decoder/Dockerfile .
if [[ "${gpu}" -eq 1 ]]; then
    step "GPU inferencer image framebus/inferencer:dev"
    build_tagged localhost/framebus/inferencer:dev --build-arg "PYTHON_IMAGE=${BASE_IMAGE}" \
        --build-arg "TENSORRT_VERSION=${FRAMEBUS_TENSORRT_VERSION:-}" \
        -f services/inferencer/Dockerfile .
fi
step "done"
podman images --filter reference='localhost/framebus/*' \
    --format '{{.Repository}}:{{.Tag}} {{.Size}}' >&2
