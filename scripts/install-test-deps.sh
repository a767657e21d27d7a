#!/usr/bin/env bash
# Install what the whole test suite needs, once; a second run only checks (`make test` calls it).
#
#  - Debian packages: Java and Maven (the local Kafka broker), and scripts/system-packages.txt
#    (GStreamer's RTSP server for the RTSP tests). Installed when run as root; otherwise this
#    stops with the exact command to run.
#  - helm, built from its Go module by scripts/install-helm.sh (for tests/deploy).
#  - versitygw, an S3-compatible server built from its Go module by scripts/install-s3-server.sh
#    (the clips tests' object store).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The local Kafka 4.x needs Java 17 or newer (`java -version` prints e.g. "17.0.15" or "1.8.0_402").
java_bin="${JAVA_HOME:+${JAVA_HOME}/bin/}java"
java_major() {
    "${java_bin}" -version 2>&1 | sed -nE 's/.*version "(1\.)?([0-9]+).*/\2/p' | head -n 1
}

need=()
if ! command -v "${java_bin}" >/dev/null; then
    need+=(openjdk-17-jre-headless)
elif (( $(java_major) < 17 )); then
    echo "install-test-deps.sh: Kafka 4 needs Java 17 or newer, but $(command -v "${java_bin}") is Java" \
        "$(java_major); install openjdk-17-jre-headless and put it first on PATH (or set JAVA_HOME)" >&2
    exit 1
fi
command -v mvn >/dev/null || need+=(maven)
while read -r pkg; do
    [[ -z "${pkg}" || "${pkg}" == \#* ]] && continue
    dpkg -s "${pkg}" >/dev/null 2>&1 || need+=("${pkg}")
done < "${repo_root}/scripts/system-packages.txt"

# shellcheck source=scripts/debian-packages.sh
source "${repo_root}/scripts/debian-packages.sh"
install_debian_packages install-test-deps.sh "${need[@]}"

bash "${repo_root}/scripts/install-helm.sh" >/dev/null
bash "${repo_root}/scripts/install-s3-server.sh" >/dev/null
