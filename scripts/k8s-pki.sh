# Sourced by local-k8s.sh: the local cluster's certificates, made with openssl, once.
#
# One CA signs everything: the API server's serving certificate, each component's client
# certificate (its user and group are the certificate's CN and O, which Kubernetes' default RBAC
# roles name), the kubelet's serving certificate, the aggregation layer's front-proxy client and
# KEDA's. The service-account key pair signs the pods' tokens.

pki_sign() {  # <name> <subject> <extensions: serverAuth/clientAuth and SANs>
    local name=$1 subject=$2 extensions=$3
    [[ -s "${PKI}/${name}.crt" ]] && return 0
    openssl req -new -newkey rsa:2048 -nodes -keyout "${PKI}/${name}.key" \
        -subj "${subject}" -out "${PKI}/${name}.csr" 2>/dev/null
    printf '%b\n' "${extensions}" > "${PKI}/${name}.ext"
    openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
        -CAcreateserial -days 3650 -sha256 -extfile "${PKI}/${name}.ext" \
        -out "${PKI}/${name}.crt" 2>/dev/null
    rm -f "${PKI}/${name}.csr"
}

pki_kubeconfig() {  # <name>: a kubeconfig that authenticates with <name>.crt
    local name=$1
    cat > "${STATE}/${name}.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: framebus-local
    cluster:
      server: https://${NODE_IP}:${APISERVER_PORT}
      certificate-authority: ${PKI}/ca.crt
users:
  - name: ${name}
    user:
      client-certificate: ${PKI}/${name}.crt
      client-key: ${PKI}/${name}.key
contexts:
  - name: framebus-local
    context: {cluster: framebus-local, user: ${name}, namespace: default}
current-context: framebus-local
KUBECONFIG
}

pki_make() {
    mkdir -p "${PKI}" && chmod 700 "${PKI}"
    if [[ ! -s "${PKI}/ca.crt" ]]; then
        openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "${PKI}/ca.key" -days 3650 \
            -subj "/CN=framebus-local-ca" -out "${PKI}/ca.crt" 2>/dev/null
    fi
    [[ -s "${PKI}/sa.key" ]] || openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
    openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
    local client="basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
    local server="basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth"
    local both="basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth"
    pki_sign apiserver "/CN=kube-apiserver" "${server}\nsubjectAltName=IP:${NODE_IP},IP:127.0.0.1,IP:${SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    pki_sign kubelet-serving "/CN=${NODE_NAME}" "${server}\nsubjectAltName=IP:${NODE_IP},DNS:${NODE_NAME}"
    pki_sign admin "/O=system:masters/CN=framebus-admin" "${client}"
    pki_sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "${client}"
    pki_sign front-proxy-client "/CN=front-proxy-client" "${client}"
    pki_sign controller-manager "/CN=system:kube-controller-manager" "${client}"
    pki_sign scheduler "/CN=system:kube-scheduler" "${client}"
    pki_sign kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}" "${client}"
    # KEDA's operator and metrics server talk gRPC over mutual TLS with this one pair, and the
    # metrics server serves the aggregated external.metrics API with it.
    pki_sign keda "/CN=keda" "${both}\nsubjectAltName=IP:127.0.0.1,IP:${NODE_IP},DNS:localhost,DNS:keda-metrics-apiserver.keda.svc,DNS:keda-operator.keda.svc"
    mkdir -p "${PKI}/keda-certs"
    cp "${PKI}/ca.crt" "${PKI}/keda-certs/ca.crt"
    cp "${PKI}/keda.crt" "${PKI}/keda-certs/tls.crt"
    cp "${PKI}/keda.key" "${PKI}/keda-certs/tls.key"
    for name in admin controller-manager scheduler kubelet; do pki_kubeconfig "${name}"; done
}
