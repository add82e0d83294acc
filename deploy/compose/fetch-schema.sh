#!/usr/bin/env bash
# The Compose file schema, for validating docker-compose.yml on machines without Docker: taken
# from the docker-compose release on PyPI (its compose/config/compose_spec.json) into
# deploy/compose/.cache/compose_spec.json. Idempotent; prints one line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/.cache"
release="docker-compose==1.29.2"
schema="$cache/compose_spec.json"
python="${PYTHON:-python3}"

if [[ -s "$schema" ]]; then
    echo "compose-schema: up to date (${schema#"$PWD/"})"
    exit 0
fi
mkdir -p "$cache"
rm -rf "$cache/download"
"$python" -m pip download -q --no-deps "$release" -d "$cache/download"
"$python" - "$cache/download" "$schema" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as archive:
    pathlib.Path(sys.argv[2] + ".tmp").write_bytes(archive.read("compose/config/compose_spec.json"))
pathlib.Path(sys.argv[2] + ".tmp").rename(sys.argv[2])
PY
rm -rf "$cache/download"
echo "compose-schema: fetched from $release into ${schema#"$PWD/"}"
