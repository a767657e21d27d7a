# Sourced by local-k8s.sh: what the chart's optional parts need on the cluster. KEDA's CRDs,
# operator and metrics API server (its operator scales, its metrics server answers the HPA's
# external.metrics queries through the API server's aggregation layer), the Prometheus Operator's
# ServiceMonitor CRD (the chart renders one; no operator is run), and a Prometheus that scrapes
# the pods by their prometheus.io annotations, for the chart's seconds-of-lag KEDA trigger.
PROMETHEUS_OPERATOR_VERSION=v0.85.0

servicemonitor_crd() {
    local dir
    dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json \
        "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    echo "${dir}/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
}

install_addons() {
    # Server-side apply: KEDA's CRDs are too large for the last-applied annotation.
    KUBECTL apply --server-side --force-conflicts -f "${KEDA_HOME}/crd" >/dev/null
    KUBECTL apply --server-side --force-conflicts -f "$(servicemonitor_crd)" >/dev/null
    local ca_bundle
    ca_bundle="$(base64 -w0 < "${PKI}/ca.crt")"
    KUBECTL apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: keda}
---
# KEDA's metrics server runs on the host: a Service without a selector, and its endpoint, for the
# aggregation layer to reach it.
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  ports: [{name: https, port: 443, targetPort: ${KEDA_METRICS_API_PORT}}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: keda-metrics-apiserver, namespace: keda}
subsets:
  - addresses: [{ip: "${NODE_IP}"}]
    ports: [{name: https, port: ${KEDA_METRICS_API_PORT}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  group: external.metrics.k8s.io
  version: v1beta1
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  caBundle: ${ca_bundle}
  groupPriorityMinimum: 100
  versionPriority: 100
---
# The HPA controller (its own service account: --use-service-account-credentials) reads the
# external metrics KEDA serves, as KEDA's own manifests grant it.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: keda-external-metrics-reader}
rules:
  - apiGroups: [external.metrics.k8s.io]
    resources: ["*"]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: keda-hpa-controller-external-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: keda-external-metrics-reader}
subjects:
  - {kind: ServiceAccount, name: horizontal-pod-autoscaler, namespace: kube-system}
EOF
}

start_prometheus() {
    mkdir -p "${STATE}/prometheus"
    cat > "${STATE}/prometheus/prometheus.yml" <<EOF
global: {scrape_interval: 5s, scrape_timeout: 4s, evaluation_interval: 5s}
scrape_configs:
  # Every pod annotated prometheus.io/scrape=true, at its prometheus.io/port and path, labelled
  # with its namespace and pod (the chart's dashboard and KEDA query select on namespace).
  - job_name: pods
    kubernetes_sd_configs:
      - {role: pod, kubeconfig_file: "${STATE}/admin.kubeconfig"}
    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape], action: keep, regex: "true"}
      - {source_labels: [__meta_kubernetes_pod_phase], action: keep, regex: Running}
      - {source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path], action: replace, target_label: __metrics_path__, regex: (.+)}
      - {source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port], action: replace, regex: '([^:]+)(?::\d+)?;(\d+)', replacement: '\$1:\$2', target_label: __address__}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
EOF
    spawn prometheus "${PROMETHEUS}" --config.file "${STATE}/prometheus/prometheus.yml" \
        --storage.tsdb.path "${STATE}/prometheus/data" --storage.tsdb.retention.time 6h \
        --web.listen-address "127.0.0.1:${PROMETHEUS_PORT}"
    wait_for "Prometheus" 60 prometheus curl -fsS "http://127.0.0.1:${PROMETHEUS_PORT}/-/ready"
}

apiservice_available() {
    [[ "$(KUBECTL get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions[?(@.type=="Available")].status}')" == True ]]
}

start_keda() {
    local certs="${PKI}/keda-certs"
    # KEDA's operator: ScaledObjects to HPAs, and the gRPC metrics service the adapter reads
    # (mutual TLS with the local CA's keda pair; cert rotation off, since the pair is given).
    KUBECONFIG="${STATE}/admin.kubeconfig" KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda WATCH_NAMESPACE="" \
        spawn keda-operator "${KEDA_HOME}/bin/keda-operator" \
        --metrics-bind-address "127.0.0.1:18080" --health-probe-bind-address "127.0.0.1:18081" \
        --metrics-service-bind-address "127.0.0.1:${KEDA_GRPC_PORT}" \
        --cert-dir "${certs}" --enable-cert-rotation=false \
        --enable-webhook-patching=false --enable-apiservice-patching=false --zap-log-level=info
    wait_for "KEDA's operator" 90 keda-operator curl -fsS "http://127.0.0.1:18081/readyz"
    KUBECONFIG="${STATE}/admin.kubeconfig" KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda WATCH_NAMESPACE="" \
        spawn keda-adapter "${KEDA_HOME}/bin/keda-adapter" \
        --secure-port "${KEDA_METRICS_API_PORT}" --cert-dir "${certs}" \
        --tls-cert-file "${certs}/tls.crt" --tls-private-key-file "${certs}/tls.key" \
        --authentication-kubeconfig "${STATE}/admin.kubeconfig" \
        --authorization-kubeconfig "${STATE}/admin.kubeconfig" \
        --lister-kubeconfig "${STATE}/admin.kubeconfig" \
        --metrics-service-address "127.0.0.1:${KEDA_GRPC_PORT}" --port 18082
    wait_for "KEDA's external metrics API" 120 keda-adapter apiservice_available
}
