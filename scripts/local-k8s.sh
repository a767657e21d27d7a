#!/usr/bin/env bash
# A one-node Kubernetes on this machine, for trying and testing the Helm chart (docs/deploy.md):
#
#   scripts/local-k8s.sh start     build (once) and start the cluster, KEDA and Prometheus
#   scripts/local-k8s.sh images    load framebus' images (make images) into the node's containerd
#   scripts/local-k8s.sh status    what runs, and the kubeconfig to use
#   scripts/local-k8s.sh stop      stop every process and container (the cluster's data is kept)
#   scripts/local-k8s.sh delete    stop, then remove the cluster's data (binaries and images kept)
#
# Processes, not containers: etcd (Debian), kube-apiserver, kube-controller-manager,
# kube-scheduler and kubelet (built from k8s.io/kubernetes by build-k8s.sh), containerd, runc and
# the CNI bridge plugin (Debian), KEDA's operator and metrics API server (built from its Go module
# by build-keda.sh) and Prometheus (built from its Go module by build-prometheus.sh: Debian's
# lacks Kubernetes discovery), which scrapes the pods by their prometheus.io annotations. No kube-proxy and no cluster DNS: pods reach Kafka and cameras by IP, the host
# reaches pods by their IPs on the node's bridge, and the API server reaches KEDA's metrics
# server through its endpoints (--enable-aggregator-routing).
# State lives under FRAMEBUS_K8S_STATE (default <repo>/.cache/k8s/cluster); root is required.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${FRAMEBUS_K8S_STATE:-${repo_root}/.cache/k8s/cluster}"
PKI="${STATE}/pki"
LOGS="${STATE}/logs"
RUN="${STATE}/run"
NODE_NAME=framebus-node
APISERVER_PORT="${FRAMEBUS_K8S_APISERVER_PORT:-16443}"
ETCD_PORT=12379
PROMETHEUS_PORT="${FRAMEBUS_K8S_PROMETHEUS_PORT:-19090}"
KEDA_GRPC_PORT=19666
KEDA_METRICS_API_PORT=16444
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
POD_CIDR=10.244.0.0/24
CONTAINERD_SOCK="${STATE}/containerd/containerd.sock"
PAUSE_IMAGE=localhost/framebus/pause:3.10
# The images the chart's local values name (tests/k8s, docs/deploy.md).
FRAMEBUS_IMAGES=(localhost/framebus/decoder:dev)

die() { echo "local-k8s: $*" >&2; exit 1; }

node_ip() {
    [[ -n "${FRAMEBUS_K8S_NODE_IP:-}" ]] && { echo "${FRAMEBUS_K8S_NODE_IP}"; return; }
    ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}'
}

require_host() {
    [[ "$(id -u)" -eq 0 ]] || die "must run as root (the kubelet and containerd manage cgroups, mounts and network namespaces)"
    local missing=()
    for tool in containerd containerd-shim-runc-v2 runc etcd openssl ip iptables go gcc podman; do
        command -v "${tool}" >/dev/null || missing+=("${tool}")
    done
    [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || missing+=("CNI plugins (/usr/lib/cni)")
    if [[ ${#missing[@]} -gt 0 ]]; then
        # shellcheck source=scripts/debian-packages.sh
        source "${repo_root}/scripts/debian-packages.sh"
        install_debian_packages local-k8s containerd runc etcd-server containernetworking-plugins \
            openssl iproute2 iptables conntrack podman gcc libc6-dev
        for tool in containerd runc etcd go gcc podman; do
            command -v "${tool}" >/dev/null || die "${tool} is still missing after installing packages"
        done
    fi
    NODE_IP="$(node_ip)"
    [[ -n "${NODE_IP}" ]] || die "no IPv4 address with a route found; set FRAMEBUS_K8S_NODE_IP"
    grep -q overlay /proc/filesystems || modprobe overlay 2>/dev/null || die "the kernel lacks overlayfs (containerd's snapshotter)"
}

# shellcheck source=scripts/k8s-pki.sh
source "${repo_root}/scripts/k8s-pki.sh"
# shellcheck source=scripts/k8s-processes.sh
source "${repo_root}/scripts/k8s-processes.sh"
# shellcheck source=scripts/k8s-addons.sh
source "${repo_root}/scripts/k8s-addons.sh"

start() {
    require_host
    local started=${SECONDS}
    KUBE_BIN="$(bash "${repo_root}/scripts/build-k8s.sh")"
    KEDA_HOME="$(bash "${repo_root}/scripts/build-keda.sh")"
    PROMETHEUS="$(bash "${repo_root}/scripts/build-prometheus.sh")"
    mkdir -p "${LOGS}" "${RUN}"
    pki_make
    write_configs
    start_containerd
    load_pause_image
    start_control_plane
    start_kubelet
    install_addons
    start_prometheus
    start_keda
    echo "local-k8s: up in $((SECONDS - started)) s; export KUBECONFIG=${STATE}/admin.kubeconfig" >&2
}

case "${1:-}" in
    start) start ;;
    images) require_host; load_images "${FRAMEBUS_IMAGES[@]}" ;;
    status) status ;;
    stop) stop_all ;;
    delete) stop_all; delete_state ;;
    *) die "usage: $0 start|images|status|stop|delete" ;;
esac
