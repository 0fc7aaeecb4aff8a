#!/usr/bin/env bash
# The official image's health-check tool, with the jars of this image.
exec java -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml \
  -cp "/opt/kafka/libs/*" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
