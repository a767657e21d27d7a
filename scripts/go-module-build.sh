# Sourced by build-keda.sh and build-prometheus.sh: build commands of a Go module whose go.mod
# has replace directives (so `go install pkg@version` refuses it) in a copy of the module's own
# folder, into <out>/bin; the copy stays at <out>/src for files the caller needs (CRDs).
#
# usage: build_module_commands <module> <version> <out> <ldflags> <tags> <binary>=<./package>...

build_module_commands() {
    local module=$1 version=$2 out=$3 ldflags=$4 tags=$5
    shift 5
    command -v go >/dev/null || { echo "Go is not on PATH (needed to build ${module} ${version})" >&2; return 1; }
    local module_dir
    module_dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "${module}@${version}" |
        python3 -c 'import json,sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))')"
    rm -rf "${out}/src" "${out}/bin.partial" && mkdir -p "${out}/bin.partial"
    cp -r "${module_dir}" "${out}/src" && chmod -R u+w "${out}/src"
    local target name package
    for target in "$@"; do
        name="${target%%=*}" package="${target#*=}"
        echo "building ${name} from ${module} ${version}" >&2
        # nice: CI builds beside other work on 2 cores. CGO off, as the projects' releases.
        (cd "${out}/src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 nice go build -trimpath \
            -tags "${tags}" -ldflags "${ldflags}" -o "${out}/bin.partial/${name}" "${package}") >&2
    done
    rm -rf "${out}/bin" && mv "${out}/bin.partial" "${out}/bin"
}
