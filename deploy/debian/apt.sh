# Sourced by the install scripts that take a tool from Debian's packages (postgres/, chromium/).
# apt_ready WHO PACKAGE: exits with a readable line unless apt-get can install PACKAGE here, running
# `apt-get update` once if its lists lack it; sets SUDO (empty as root) and UPDATED (for the last line).

apt_ready() {
    who=$1
    package=$2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: no apt-get here; install Debian's '$package' yourself ($INSTALL_YOURSELF)" >&2
        exit 1
    fi
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
            echo "$who: run as root (or install sudo) to apt-get install $package" >&2
            exit 1
        fi
    fi
    UPDATED=
    if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        $SUDO apt-get update -qq
        UPDATED=" (after apt-get update)"
    fi
    if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        echo "$who: apt has no '$package' package; check /etc/apt/sources.list" >&2
        exit 1
    fi
}
