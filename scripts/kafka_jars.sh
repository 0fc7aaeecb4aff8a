#!/usr/bin/env bash
# Fetch Apache Kafka's jars (broker + KRaft controller + log4j2 backend) from Maven Central once,
# into a cache outside the checkout, and print the directory that holds them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${KAFKA_VERSION:-4.1.1}"
log4j="2.24.3"
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}"
dest="$cache/kafka-$version"
if [ ! -f "$dest/.complete" ]; then
  mkdir -p "$cache"
  exec 9>"$cache/.kafka.lock"
  flock 9
  if [ ! -f "$dest/.complete" ]; then
    echo "m1flow: fetching Kafka $version jars from Maven Central into $dest (first run only)" >&2
    work="$(mktemp -d)"
    sed -e "s/@KAFKA_VERSION@/$version/" -e "s/@LOG4J_VERSION@/$log4j/" \
      "$here/ops/kafka/pom.xml.in" > "$work/pom.xml"
    rm -rf "$dest.tmp"
    mvn -q -B -f "$work/pom.xml" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory="$dest.tmp/lib" -DincludeScope=runtime >&2
    rm -rf "$dest"; mv "$dest.tmp" "$dest"; rm -rf "$work"
    touch "$dest/.complete"
  fi
fi
echo "$dest/lib"
