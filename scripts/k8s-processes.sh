# Sourced by local-k8s.sh: the node's processes (containerd, etcd, the control plane, the
# kubelet), each started in the background with its pid under ${RUN} and its log under ${LOGS}.

KUBECTL() { "${KUBE_BIN}/kubectl" --kubeconfig "${STATE}/admin.kubeconfig" "$@"; }

spawn() {  # <name> <command...>: start unless running
    local name=$1
    shift
    if is_running "${name}"; then return 0; fi
    setsid nohup "$@" >>"${LOGS}/${name}.log" 2>&1 < /dev/null &
    echo $! > "${RUN}/${name}.pid"
}

is_running() {
    local pid
    pid="$(cat "${RUN}/$1.pid" 2>/dev/null)" || return 1
    [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null
}

wait_for() {  # <what> <seconds> <log name> <command...>: until the command succeeds
    local what=$1 limit=$2 log=$3
    shift 3
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if ! is_running "${log}"; then
            tail -n 30 "${LOGS}/${log}.log" >&2
            die "${log} exited while waiting for ${what} (log: ${LOGS}/${log}.log)"
        fi
        if ((SECONDS > deadline)); then
            tail -n 30 "${LOGS}/${log}.log" >&2
            die "${what} not ready after ${limit} s (log: ${LOGS}/${log}.log)"
        fi
        sleep 1
    done
}

write_configs() {
    mkdir -p "${STATE}/containerd" "${STATE}/cni/net.d" "${STATE}/kubelet" "${STATE}/etcd"
    cat > "${STATE}/containerd/config.toml" <<EOF
version = 2
root = "${STATE}/containerd/root"
state = "${STATE}/containerd/state"
[grpc]
  address = "${CONTAINERD_SOCK}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # This machine's root lacks CAP_SYS_RESOURCE: runc may not lower a container's OOM score below
  # containerd's own (it fails with "failed to update /proc/self/oom_score_adj").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${STATE}/cni/net.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "${STATE}/containerd/opt"
EOF
    # One bridge, the node's pod range; pods reach the host (Kafka, cameras) through its gateway.
    cat > "${STATE}/cni/net.d/10-framebus.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "framebus-local",
  "plugins": [
    {"type": "bridge", "bridge": "fbk8s0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "${POD_CIDR}"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "${STATE}/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    cat > "${STATE}/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "${PKI}/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
# This machine's kernel mounts cgroup v1 only; Kubernetes 1.34 still runs on it when asked.
failCgroupV1: false
containerRuntimeEndpoint: "unix://${CONTAINERD_SOCK}"
failSwapOn: false
tlsCertFile: "${PKI}/kubelet-serving.crt"
tlsPrivateKeyFile: "${PKI}/kubelet-serving.key"
readOnlyPort: 0
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# A development machine's disk is shared with everything else on it: evict only when nearly full.
evictionHard: {memory.available: "200Mi", nodefs.available: "3%", imagefs.available: "3%"}
imageGCHighThresholdPercent: 97
imageGCLowThresholdPercent: 95
EOF
}

start_containerd() {
    spawn containerd containerd --config "${STATE}/containerd/config.toml"
    wait_for "containerd" 60 containerd ctr --address "${CONTAINERD_SOCK}" version
}

ctr_k8s() { ctr --address "${CONTAINERD_SOCK}" -n k8s.io "$@"; }

load_pause_image() {
    ctr_k8s images ls -q | grep -qx "${PAUSE_IMAGE}" && return 0
    # The pod sandbox's process, built from Kubernetes' own source (build/pause), since no
    # registry is reached: reaps zombies and sleeps until signalled.
    local work="${STATE}/pause-build"
    rm -rf "${work}" && mkdir -p "${work}"
    gcc -Os -static -DVERSION=v3.10-framebus -o "${work}/pause" \
        "$(dirname "${KUBE_BIN}")/src/build/pause/linux/pause.c"
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "${work}/Containerfile"
    podman build -q -t "${PAUSE_IMAGE}" "${work}" >/dev/null
    load_images "${PAUSE_IMAGE}"
}

load_images() {  # <podman image>...: copy each into the node's containerd, unless there already
    local image id marker
    mkdir -p "${STATE}/containerd/loaded"
    for image in "$@"; do
        id="$(podman image inspect --format '{{.Id}}' "${image}" 2>/dev/null)" ||
            die "image ${image} is missing in podman: run \`make images\` first"
        # containerd lists manifest digests, podman image ids: remember which id was loaded.
        marker="${STATE}/containerd/loaded/${image//[\/:]/_}"
        if [[ "$(cat "${marker}" 2>/dev/null)" == "${id}" ]] &&
            ctr_k8s images ls -q | grep -qxF "${image}"; then
            continue
        fi
        echo "local-k8s: loading ${image} into containerd" >&2
        podman save --format docker-archive "${image}" | ctr_k8s images import - >/dev/null
        echo "${id}" > "${marker}"
    done
}

start_control_plane() {
    spawn etcd etcd --name "${NODE_NAME}" --data-dir "${STATE}/etcd" \
        --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" \
        --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
        --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
        --initial-cluster "${NODE_NAME}=http://127.0.0.1:$((ETCD_PORT + 1))"
    wait_for "etcd" 60 etcd curl -fsS "http://127.0.0.1:${ETCD_PORT}/health"
    spawn kube-apiserver "${KUBE_BIN}/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
        --bind-address 0.0.0.0 --secure-port "${APISERVER_PORT}" --advertise-address "${NODE_IP}" \
        --tls-cert-file "${PKI}/apiserver.crt" --tls-private-key-file "${PKI}/apiserver.key" \
        --client-ca-file "${PKI}/ca.crt" \
        --service-account-key-file "${PKI}/sa.pub" \
        --service-account-signing-key-file "${PKI}/sa.key" \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range "${SERVICE_CIDR}" \
        --authorization-mode Node,RBAC --allow-privileged=true \
        --kubelet-client-certificate "${PKI}/apiserver-kubelet-client.crt" \
        --kubelet-client-key "${PKI}/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority "${PKI}/ca.crt" \
        --kubelet-preferred-address-types InternalIP,Hostname \
        --requestheader-client-ca-file "${PKI}/ca.crt" \
        --requestheader-allowed-names front-proxy-client \
        --requestheader-username-headers X-Remote-User \
        --requestheader-group-headers X-Remote-Group \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --proxy-client-cert-file "${PKI}/front-proxy-client.crt" \
        --proxy-client-key-file "${PKI}/front-proxy-client.key" \
        --enable-aggregator-routing=true
    wait_for "the API server" 180 kube-apiserver KUBECTL get --raw /readyz
    spawn kube-controller-manager "${KUBE_BIN}/kube-controller-manager" \
        --kubeconfig "${STATE}/controller-manager.kubeconfig" \
        --authentication-kubeconfig "${STATE}/controller-manager.kubeconfig" \
        --authorization-kubeconfig "${STATE}/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file "${PKI}/sa.key" --root-ca-file "${PKI}/ca.crt" \
        --cluster-signing-cert-file "${PKI}/ca.crt" --cluster-signing-key-file "${PKI}/ca.key"
    spawn kube-scheduler "${KUBE_BIN}/kube-scheduler" \
        --kubeconfig "${STATE}/scheduler.kubeconfig" \
        --authentication-kubeconfig "${STATE}/scheduler.kubeconfig" \
        --authorization-kubeconfig "${STATE}/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --leader-elect=false
}

node_ready() {
    [[ "$(KUBECTL get node "${NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

start_kubelet() {
    spawn kubelet "${KUBE_BIN}/kubelet" --config "${STATE}/kubelet/config.yaml" \
        --kubeconfig "${STATE}/kubelet.kubeconfig" --root-dir "${STATE}/kubelet/root" \
        --hostname-override "${NODE_NAME}" --node-ip "${NODE_IP}"
    wait_for "node ${NODE_NAME} Ready" 180 kubelet node_ready
    # The default ServiceAccount exists before any pod is created in the namespace.
    wait_for "the default ServiceAccount" 60 kube-controller-manager KUBECTL get serviceaccount default
}

status() {
    local name
    for name in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet prometheus keda-operator keda-adapter; do
        if is_running "${name}"; then echo "${name}: running (pid $(cat "${RUN}/${name}.pid"))"; else echo "${name}: stopped"; fi
    done
    echo "KUBECONFIG=${STATE}/admin.kubeconfig"
}

stop_process() {
    local name=$1 pid
    pid="$(cat "${RUN}/${name}.pid" 2>/dev/null)" || return 0
    if kill -0 "${pid}" 2>/dev/null; then
        kill -TERM "${pid}" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "${pid}" 2>/dev/null || true
    fi
    rm -f "${RUN}/${name}.pid"
}

stop_all() {
    local name
    for name in keda-adapter keda-operator prometheus kubelet; do stop_process "${name}"; done
    # The pods' containers outlive the kubelet: kill them while containerd still knows them.
    if is_running containerd; then
        for name in $(ctr_k8s tasks ls -q 2>/dev/null); do
            ctr_k8s tasks kill -s SIGKILL "${name}" >/dev/null 2>&1 || true
        done
        sleep 2
        for name in $(ctr_k8s tasks ls -q 2>/dev/null); do
            ctr_k8s tasks delete -f "${name}" >/dev/null 2>&1 || true
        done
    fi
    for name in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop_process "${name}"; done
    pkill -f "containerd-shim-runc-v2 .*-address ${CONTAINERD_SOCK}" 2>/dev/null || true
    # Volumes and sandboxes the kubelet and containerd mounted, deepest first.
    awk -v root="${STATE}/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r |
        while read -r mount; do umount -l "${mount}" 2>/dev/null || true; done
    ip link delete fbk8s0 2>/dev/null || true
}

delete_state() {
    # Keep containerd's image store (root) and the certificates: a fresh cluster starts faster.
    rm -rf "${STATE}/etcd" "${STATE}/kubelet/root" "${STATE}/cni/ipam" "${STATE}/prometheus" \
        "${STATE}/containerd/state" "${LOGS}" "${RUN}"
}
