#!/bin/sh
# kafka-configs.sh as the official image has it, from the broker's own jars (ConfigCommand ships in
# kafka_2.13; the separate tools jar is not in the image). compose.yaml's healthcheck calls it.
exec java -Xmx128m -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp '/opt/kafka/libs/*' \
  kafka.admin.ConfigCommand "$@"
