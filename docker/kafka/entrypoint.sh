#!/usr/bin/env bash
# Turn KAFKA_* variables into server.properties the way the official apache/kafka image does
# ('_' -> '.', '__' -> '_', '___' -> '-', lower case; *_OPTS are JVM options, not settings),
# format the log directory once for CLUSTER_ID, then run the broker in the foreground.
set -euo pipefail
props=/opt/kafka/config/server.properties
: > "$props"
while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_OPTS|KAFKA_*_OPTS|KAFKA_VERSION) continue ;;
    KAFKA_*) ;;
    *) continue ;;
  esac
  key="${name#KAFKA_}"
  key="${key//___/-}"
  key="${key//__/@}"
  key="${key//_/.}"
  key="${key//@/_}"
  echo "${key,,}=${value}" >> "$props"
done < <(env)
: "${CLUSTER_ID:?CLUSTER_ID (a 22-character Kafka Uuid) is required in KRaft mode}"
java_opts=(${KAFKA_HEAP_OPTS:-} -XX:+UseSerialGC -Djava.awt.headless=true
           -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml ${KAFKA_OPTS:-} -cp "/opt/kafka/libs/*")
java "${java_opts[@]}" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$props" --ignore-formatted
exec java "${java_opts[@]}" kafka.Kafka "$props"
