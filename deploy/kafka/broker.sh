#!/usr/bin/env bash
# A local single-node Kafka broker (KRaft, broker + controller) for development: no Docker.
#
#   deploy/kafka/broker.sh up      fetch the jars, format storage (first time), start, wait until ready
#   deploy/kafka/broker.sh down    stop it (SIGTERM, then SIGKILL after $KAFKA_STOP_TIMEOUT s)
#   deploy/kafka/broker.sh status  print pid and bootstrap address; exit 1 when not running
#
# Bound to 127.0.0.1 on $KAFKA_PORT (default: a free port) and $KAFKA_CONTROLLER_PORT (default: a
# free port). The bootstrap address goes to deploy/kafka/.cache/broker.address, the pid to
# broker.pid, data and log to deploy/kafka/.cache/broker/. Every `up` formats empty storage unless
# KAFKA_KEEP_DATA=1 (then the previous topics and offsets stay, and start-up waits ~9 s for the
# previous run's broker registration to expire). Heap: $KAFKA_HEAP_OPTS (default -Xmx512m -Xms128m).
#
# KAFKA_SASL_SSL=1 adds a SASL_SSL listener (TLS + SCRAM-SHA-512 logins; sasl_ssl.properties.in) on
# $KAFKA_SASL_SSL_PORT (default: a free port): openssl makes a CA and a broker certificate for
# 127.0.0.1 in deploy/kafka/.cache/broker/tls (kept across runs; clients trust tls/ca.pem), and user
# $KAFKA_SASL_USER (default sluice) gets the password $KAFKA_SASL_PASSWORD (default: a random one,
# kept in broker/sasl.password, mode 0600) when the storage is formatted. The bus URL goes to
# deploy/kafka/.cache/broker.sasl_ssl_url; give Sluice the login in SLUICE_KAFKA_USERNAME/PASSWORD.
#
# For a node of a cluster (deploy/kafka/cluster.sh): KAFKA_INSTANCE names the node (default broker:
# .cache/$KAFKA_INSTANCE/, .pid, .address), KAFKA_PROPERTIES_EXTRA is a file appended to its
# server.properties (its node.id, the controller quorum...: the later value of a key wins),
# KAFKA_CLUSTER_ID formats it into that cluster, and KAFKA_WAIT=0 returns once it is started, without
# waiting for it to serve (a node of a static quorum waits for the others).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/.cache"
instance="${KAFKA_INSTANCE:-broker}"
state="$cache/$instance"
pid_file="$cache/$instance.pid"
address_file="$cache/$instance.address"
log_file="$state/broker.log"

running_pid() {  # the pid of our broker if it is alive (a recycled pid is not ours)
    [[ -f "$pid_file" ]] || return 1
    local pid
    pid="$(cat "$pid_file")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "kafka.Kafka" \
        && echo "$pid"
}

make_certificates() {  # a CA and a certificate for 127.0.0.1/localhost it signed; broker.pem = key + chain
    local dir="$1" key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    [[ -f "$dir/broker.pem" && -f "$dir/ca.pem" ]] && return 0
    command -v openssl >/dev/null || { echo "kafka: KAFKA_SASL_SSL=1 needs openssl" >&2; exit 1; }
    mkdir -p "$dir" && chmod 700 "$dir"
    (
        cd "$dir"
        openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days 365 -subj /CN=sluice-kafka-dev-ca 2>/dev/null
        openssl req -new "${key[@]}" -keyout broker.key -out broker.csr -subj /CN=localhost 2>/dev/null
        echo "subjectAltName=IP:127.0.0.1,DNS:localhost" >broker.ext
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.crt -days 365 \
            -extfile broker.ext 2>/dev/null
        cat broker.key broker.crt ca.pem >broker.pem
        chmod 600 ca.key broker.key broker.pem
    ) || { echo "kafka: making the TLS certificates in $dir failed" >&2; exit 1; }
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

up() {
    if pid="$(running_pid)"; then
        echo "kafka: already running (pid $pid) at $(cat "$address_file")"
        return 0
    fi
    "$here/fetch.sh"
    command -v java >/dev/null || { echo "kafka: java (17+) is required" >&2; exit 1; }
    local port="${KAFKA_PORT:-$(free_port)}" controller_port="${KAFKA_CONTROLLER_PORT:-$(free_port)}"
    local cp="$cache/libs/*" log4j="-Dlog4j2.configurationFile=file:$here/log4j2.properties"
    local sasl_ssl="${KAFKA_SASL_SSL:-0}" sasl_port="" scram=()
    [[ "${KAFKA_KEEP_DATA:-0}" == 1 ]] || rm -rf "$state/data"
    mkdir -p "$state/data"
    sed -e "s|\${PORT}|$port|g" -e "s|\${CONTROLLER_PORT}|$controller_port|g" -e "s|\${LOG_DIRS}|$state/data|g" \
        "$here/server.properties.in" >"$state/server.properties"
    if [[ -n "${KAFKA_PROPERTIES_EXTRA:-}" ]]; then
        { echo; echo "# $KAFKA_PROPERTIES_EXTRA"; cat "$KAFKA_PROPERTIES_EXTRA"; } >>"$state/server.properties"
    fi
    rm -f "$cache/$instance.sasl_ssl_url"
    if [[ "$sasl_ssl" == 1 ]]; then
        sasl_port="${KAFKA_SASL_SSL_PORT:-$(free_port)}"
        make_certificates "$state/tls"
        local user="${KAFKA_SASL_USER:-sluice}" password="${KAFKA_SASL_PASSWORD:-}"
        if [[ -z "$password" ]]; then
            [[ -s "$state/sasl.password" ]] || (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$state/sasl.password")
            password="$(cat "$state/sasl.password")"
        fi
        scram=(--add-scram "SCRAM-SHA-512=[name=$user,password=$password]")
        { echo; sed -e "s|\${PORT}|$port|g" -e "s|\${CONTROLLER_PORT}|$controller_port|g" \
            -e "s|\${SASL_SSL_PORT}|$sasl_port|g" -e "s|\${TLS_DIR}|$state/tls|g" "$here/sasl_ssl.properties.in"
        } >>"$state/server.properties"
    fi
    if [[ ! -f "$state/data/meta.properties" ]]; then
        local cluster_id
        # KAFKA_CLUSTER_ID, else 16 random bytes, URL-safe base64 without padding, not starting with "-" (Kafka's Uuid)
        cluster_id="${KAFKA_CLUSTER_ID:--}"
        while [[ "$cluster_id" == -* ]]; do
            cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
        done
        java "$log4j" -cp "$cp" kafka.tools.StorageTool format -t "$cluster_id" -c "$state/server.properties" "${scram[@]}" \
            >"$state/format.log" 2>&1 \
            || { cat "$state/format.log" >&2; echo "kafka: formatting $state/data failed" >&2; exit 1; }
    fi
    : >"$log_file"
    # shellcheck disable=SC2086  # KAFKA_HEAP_OPTS holds several options
    setsid nohup java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m} -Djava.awt.headless=true "$log4j" \
        -cp "$cp" kafka.Kafka "$state/server.properties" >>"$log_file" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$pid_file"
    echo "127.0.0.1:$port" >"$address_file"
    if [[ "${KAFKA_WAIT:-1}" == 0 ]]; then
        echo "kafka: $instance starting (pid $pid) at 127.0.0.1:$port; log: ${log_file#"$PWD/"}"
        return 0
    fi
    local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-90}))
    until grep -q "Kafka Server started" "$log_file"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$log_file" >&2
            rm -f "$pid_file" "$address_file"
            echo "kafka: the broker exited during start-up; log: $log_file" >&2
            exit 1
        fi
        if ((SECONDS > deadline)); then
            tail -n 40 "$log_file" >&2
            echo "kafka: not ready after ${KAFKA_START_TIMEOUT:-90}s; stopping it; log: $log_file" >&2
            down >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "kafka: running (pid $pid) at 127.0.0.1:$port; log: ${log_file#"$PWD/"}"
    if [[ "$sasl_ssl" == 1 ]]; then
        echo "kafka://127.0.0.1:$sasl_port?security_protocol=SASL_SSL&sasl_mechanism=SCRAM-SHA-512&ssl_cafile=$state/tls/ca.pem" \
            >"$cache/$instance.sasl_ssl_url"
        echo "kafka: SASL_SSL at 127.0.0.1:$sasl_port (user ${KAFKA_SASL_USER:-sluice}; bus URL in $cache/$instance.sasl_ssl_url)"
    fi
}

down() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$pid_file" "$address_file"
        echo "kafka: not running"
        return 0
    fi
    kill -TERM "$pid"
    local deadline=$((SECONDS + ${KAFKA_STOP_TIMEOUT:-30}))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS > deadline)); then
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    rm -f "$pid_file" "$address_file" "$cache/$instance.sasl_ssl_url"
    echo "kafka: stopped (pid $pid)"
}

status() {
    local pid
    if pid="$(running_pid)"; then
        echo "kafka: running (pid $pid) at $(cat "$address_file")"
    else
        echo "kafka: not running"
        return 1
    fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
