#!/bin/sh
# Installs Debian's headless-capable Chromium and its chromedriver (/usr/bin/chromium,
# /usr/bin/chromedriver) for the web console's browser tests (tests/integration/test_console_browser.py).
# Idempotent and quick when both are there already: `make chromium` runs it, `make test` needs it.
set -eu

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "chromium: /usr/bin/chromium and /usr/bin/chromedriver already installed, nothing to do"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: no apt-get here; install chromium and chromedriver yourself as /usr/bin/chromium and" \
         "/usr/bin/chromedriver" >&2
    exit 1
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "chromium: run as root (or install sudo) to apt-get install chromium chromium-driver" >&2
        exit 1
    fi
fi

updated=
if ! apt-cache policy chromium-driver 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    $SUDO apt-get update -qq
    updated=" (after apt-get update)"
fi
if ! apt-cache policy chromium-driver 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    echo "chromium: apt has no 'chromium-driver' package; check /etc/apt/sources.list" >&2
    exit 1
fi

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "chromium: apt-get install chromium chromium-driver ran but /usr/bin/chromium or /usr/bin/chromedriver" \
         "is missing" >&2
    exit 1
fi
echo "chromium: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium) with apt-get$updated"
