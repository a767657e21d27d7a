#!/bin/bash
# The health check: exit 0 when the broker answers an ApiVersions request with no error.
# Stands in for Kafka's tool of this name (which these jars lack) at the path the apache/kafka
# image has it, with the one option a health check passes: --bootstrap-server HOST:PORT.
set -uo pipefail
server=localhost:9092
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bootstrap-server) server="$2"; shift 2 ;;
        *) shift ;;
    esac
done
exec 3<>"/dev/tcp/${server%:*}/${server##*:}" || exit 1
# ApiVersions v0: length 12, api key 18, version 0, correlation id 1, client id "hc".
printf '\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x02hc' >&3
reply="$(timeout 5 head -c 10 <&3 | od -An -tx1 | tr -d ' \n')"
# Length (4 bytes), correlation id 1, error code 0.
[[ "${reply:8:8}" == 00000001 && "${reply:16:4}" == 0000 ]]
