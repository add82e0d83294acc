#!/bin/sh
# Installs the PostgreSQL server binaries that tests.support.postgres.PostgresServer starts
# (initdb, pg_ctl, postgres under /usr/lib/postgresql/<major>/bin), from Debian's `postgresql`
# package. Idempotent and quick when they are there already: `make postgres` runs it.
#
# The cluster Debian creates (/etc/postgresql/<major>/main) is left stopped: tests never use it,
# they initdb a throwaway cluster of their own on a free port.
set -eu

PG_ROOT="${PG_ROOT:-/usr/lib/postgresql}"  # overridable only to exercise the install path

installed_major() {
    for bin in $(ls -d "$PG_ROOT"/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && [ -x "$bin/postgres" ]; then
            basename "$(dirname "$bin")"
            return 0
        fi
    done
    return 1
}

if major=$(installed_major); then
    echo "postgres: PostgreSQL $major server binaries already in $PG_ROOT/$major/bin, nothing to do"
    exit 0
fi

INSTALL_YOURSELF="initdb, pg_ctl, postgres; point SLUICE_POSTGRES_BIN at their bin directory"
. "$(dirname "$0")/../debian/apt.sh"
apt_ready postgres postgresql

# Debian's maintainer scripts create a cluster and try to start it through invoke-rc.d; with no
# init system (containers, CI) that start fails. policy-rc.d exiting 101 tells them not to try.
# An existing policy-rc.d (Docker images ship one) is left alone.
POLICY=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$POLICY" ]; then
    $SUDO sh -c "printf '#!/bin/sh\nexit 101\n' > $POLICY && chmod 755 $POLICY"
    own_policy=yes
fi
cleanup() { if [ -n "$own_policy" ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT INT TERM

# --no-upgrade: ensure presence, never upgrade a PostgreSQL someone already has.
$SUDO env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends --no-upgrade postgresql >/dev/null

if ! major=$(installed_major); then
    echo "postgres: apt-get install postgresql ran but no initdb/pg_ctl/postgres under $PG_ROOT/*/bin" >&2
    exit 1
fi
echo "postgres: installed PostgreSQL $major server binaries into $PG_ROOT/$major/bin with apt-get$UPDATED"
