#!/bin/sh
# Installs promtool (from Debian's prometheus package) for tests/integration/test_deploy_monitoring.py,
# which checks deploy/prometheus/sluice-alerts.yml and the dashboard's queries with it. The package's
# server is not started here (no init system in the test machines; tests start nothing of it).
# Idempotent and quick when promtool is there already: `make promtool` runs it, `make test` needs it.
set -eu

if command -v promtool >/dev/null 2>&1; then
    echo "promtool: $(command -v promtool) already installed, nothing to do"
    exit 0
fi

INSTALL_YOURSELF="so that promtool is on the PATH"
. "$(dirname "$0")/../debian/apt.sh"
apt_ready promtool prometheus

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null

if ! command -v promtool >/dev/null 2>&1; then
    echo "promtool: apt-get install prometheus ran but promtool is not on the PATH" >&2
    exit 1
fi
echo "promtool: installed $(promtool --version 2>&1 | head -1) with apt-get$UPDATED"
