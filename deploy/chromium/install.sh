#!/bin/sh
# Installs Debian's headless-capable Chromium and its chromedriver (/usr/bin/chromium,
# /usr/bin/chromedriver) for the web console's browser tests (tests/integration/test_console_browser.py).
# Idempotent and quick when both are there already: `make chromium` runs it, `make test` needs it.
set -eu

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "chromium: /usr/bin/chromium and /usr/bin/chromedriver already installed, nothing to do"
    exit 0
fi

INSTALL_YOURSELF="as /usr/bin/chromium and /usr/bin/chromedriver"
. "$(dirname "$0")/../debian/apt.sh"
apt_ready chromium chromium-driver

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "chromium: apt-get install chromium chromium-driver ran but /usr/bin/chromium or /usr/bin/chromedriver" \
         "is missing" >&2
    exit 1
fi
echo "chromium: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium) with apt-get$UPDATED"
