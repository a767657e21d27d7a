# Sourced by build-k8s.sh, build-keda.sh and build-prometheus.sh: build commands of a Go module
# whose go.mod has replace directives (so `go install pkg@version` refuses it) in a copy of the
# module's own folder, <out>/src (kept for files the caller needs, such as CRDs), into <out>/bin.
#
# usage: module_source <module> <version> <out>     (then edit <out>/src if need be)
#        build_commands <out> <ldflags> <tags> <binary>=<./package>...

module_source() {
    local module=$1 version=$2 out=$3 module_dir
    command -v go >/dev/null || { echo "Go is not on PATH (needed to build ${module} ${version})" >&2; return 1; }
    module_dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "${module}@${version}" |
        python3 -c 'import json,sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))')"
    rm -rf "${out}/src" && mkdir -p "${out}"
    cp -r "${module_dir}" "${out}/src" && chmod -R u+w "${out}/src"
}

build_commands() {
    local out=$1 ldflags=$2 tags=$3
    shift 3
    rm -rf "${out}/bin.partial" && mkdir -p "${out}/bin.partial"
    local target name package
    for target in "$@"; do
        name="${target%%=*}" package="${target#*=}"
        echo "building ${name}" >&2
        # GOWORK=off: a module's own go.work may list folders its zip leaves out (Kubernetes').
        # nice: CI builds beside other work on 2 cores. CGO off, as the projects' releases.
        (cd "${out}/src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 nice go build -trimpath \
            -tags "${tags}" -ldflags "${ldflags}" -o "${out}/bin.partial/${name}" "${package}") >&2
    done
    rm -rf "${out}/bin" && mv "${out}/bin.partial" "${out}/bin"
}
