#!/usr/bin/env bash
# Put the jars of the Kafka broker listed in pom.xml into deploy/kafka/.cache/libs (idempotent).
# Skips Maven when the stamp file holds the current hash of pom.xml and the jars are there; Maven's
# own ~/.m2 cache makes a re-fetch after a pom change fast. Prints one line.
# Needs Maven and Java 17; reaches only Maven Central.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/.cache"
libs="$cache/libs"
stamp="$cache/libs.stamp"
mkdir -p "$cache"

# One fetch at a time (make and a test run may race on a fresh machine).
exec 9>"$cache/fetch.lock"
flock 9

hash="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$hash" ]] && compgen -G "$libs/kafka_2.13-*.jar" >/dev/null; then
    echo "kafka-fetch: up to date ($(ls "$libs" | wc -l) jars in ${libs#"$PWD/"})"
    exit 0
fi

command -v mvn >/dev/null || { echo "kafka-fetch: Maven (mvn) is required to fetch the Kafka jars" >&2; exit 1; }
started=$SECONDS
rm -rf "$libs.tmp"
if ! out="$(mvn -B -q -f "$here/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$libs.tmp" -DincludeScope=runtime 2>&1)"; then
    printf '%s\n' "$out" >&2
    echo "kafka-fetch: mvn dependency:copy-dependencies failed (see above)" >&2
    rm -rf "$libs.tmp"
    exit 1
fi
rm -rf "$libs"
mv "$libs.tmp" "$libs"
echo "$hash" >"$stamp"
echo "kafka-fetch: fetched $(ls "$libs" | wc -l) jars into ${libs#"$PWD/"} in $((SECONDS - started))s"
