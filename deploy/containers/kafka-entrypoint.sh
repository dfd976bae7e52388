#!/bin/sh
# Kafka in KRaft combined mode for the test stack (image built by deploy/containers/build-images.sh).
# KAFKA_PORT: the port the broker listens on inside the container AND the host port it is mapped
# to, so the advertised address (KAFKA_ADVERTISED_HOST:KAFKA_PORT) is reachable from the host.
# Any other KAFKA_<NAME> sets a server property the way the official apache/kafka image reads its
# environment (KAFKA_ADVERTISED_LISTENERS -> advertised.listeners; `__` -> `_`, `___` -> `-`),
# so compose.yaml runs unchanged on this image; CLUSTER_ID fixes the cluster id.
set -eu
port="${KAFKA_PORT:-9092}"
host="${KAFKA_ADVERTISED_HOST:-127.0.0.1}"
props=/opt/kafka/server.properties
sed -i \
  -e "s|^listeners=.*|listeners=PLAINTEXT://0.0.0.0:$port,CONTROLLER://127.0.0.1:9093|" \
  -e "s|^advertised.listeners=.*|advertised.listeners=PLAINTEXT://$host:$port|" "$props"

set_property() {
  grep -v "^$1=" "$props" >"$props.new" || true
  printf '%s=%s\n' "$1" "$2" >>"$props.new"
  mv "$props.new" "$props"
}
env | grep '^KAFKA_' | while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_PORT | KAFKA_ADVERTISED_HOST | KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS) ;;
    *)
      key="$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')"
      set_property "$key" "$value"
      ;;
  esac
done

data="$(sed -n 's/^log.dirs=//p' "$props")"
if [ ! -f "$data/meta.properties" ]; then
  # A fresh container is a fresh cluster: a random id (never starting with '-', see _kafka.py).
  cid="${CLUSTER_ID:-$(head -c 16 /dev/urandom | base64 | tr "+/" "-_" | tr -d "=" | sed "s/^-/A/")}"
  java -Xmx256m -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp '/opt/kafka/libs/*' \
    kafka.tools.StorageTool format -t "$cid" -c "$props" --ignore-formatted
fi
cd /var/lib/kafka
eval "exec $(cat /opt/kafka/kafka-command)"
