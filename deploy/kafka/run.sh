#!/bin/bash
# The broker's entry point: server.properties from the KAFKA_* variables (as the apache/kafka
# image reads them: KAFKA_LOG_DIRS -> log.dirs; "__" stands for "_" and "___" for "-"), the
# KRaft storage formatted once with CLUSTER_ID, then the broker in the foreground.
set -euo pipefail

props=/opt/kafka/config/server.properties
# Variables that configure the JVM or this script, not the broker.
skip=" KAFKA_HEAP_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_OPTS KAFKA_VERSION "
: >"${props}"
while IFS='=' read -r name _; do
    [[ "${name}" == KAFKA_* && "${skip}" != *" ${name} "* ]] || continue
    key="${name#KAFKA_}"
    key="${key//___/-}"
    key="${key//__/@}"
    key="${key//_/.}"
    key="${key//@/_}"
    printf '%s=%s\n' "${key,,}" "${!name}" >>"${props}"
done < <(env)

classpath="/opt/kafka/libs/*"
# The apache/kafka image's default cluster id, so a data volume moves between the two images.
cluster_id="${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}"
java -Xmx256m -cp "${classpath}" kafka.tools.StorageTool format --ignore-formatted \
    "--cluster-id=${cluster_id}" -c "${props}"

# shellcheck disable=SC2086  # the options are words
exec java ${KAFKA_HEAP_OPTS} -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile=/opt/kafka/log4j2.xml ${KAFKA_OPTS:-} \
    -cp "${classpath}" kafka.Kafka "${props}"
