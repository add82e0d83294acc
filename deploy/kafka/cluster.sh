#!/usr/bin/env bash
# A local 3-node Kafka cluster (KRaft; each node broker + controller in one java process) for work on
# broker failures: one node down leaves a controller quorum of two and every partition a leader.
#
#   deploy/kafka/cluster.sh up          fresh storage, start the nodes on free loopback ports, wait until all serve
#   deploy/kafka/cluster.sh down        stop every node (SIGTERM, then SIGKILL after $KAFKA_STOP_TIMEOUT s, default 15)
#   deploy/kafka/cluster.sh status      each node's pid and address; exit 1 when a node is not running
#   deploy/kafka/cluster.sh kill N      SIGKILL node N (1..3) by its pid: a crash
#   deploy/kafka/cluster.sh restart N   start node N again on its storage and ports, wait until it serves
#
# Each node is a deploy/kafka/broker.sh instance `cluster-nodeN` (data and log in .cache/cluster-nodeN/,
# pid in .cache/cluster-nodeN.pid) with the overrides of tests.support.kafka_cluster.cluster_properties
# (the same cluster the tests start: node id, static quorum, internal topics on every node, a dead
# broker fenced after 3 s). The bootstrap list goes to .cache/cluster.address and a bus URL with three
# replicas and min.insync.replicas=2 to .cache/cluster.url:
#   sluice serve matcher --bus "$(cat deploy/kafka/.cache/cluster.url)"
# Heap per node: $KAFKA_CLUSTER_HEAP_OPTS (default -Xmx384m -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="$here/.cache"
nodes=(1 2 3)
heap="${KAFKA_CLUSTER_HEAP_OPTS:--Xmx384m -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}"

node() {  # broker.sh for node $1 with the rest of the arguments; its settings from .cache/cluster-node$1.env
    local n="$1"
    shift
    # shellcheck disable=SC1090
    [[ -f "$cache/cluster-node$n.env" ]] && source "$cache/cluster-node$n.env"
    KAFKA_INSTANCE="cluster-node$n" KAFKA_PROPERTIES_EXTRA="$cache/cluster-node$n.properties" KAFKA_SASL_SSL=0 \
        KAFKA_HEAP_OPTS="$heap" KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-15}" "$@"
}

wait_serving() {  # until every node given logged the ready line after its last start
    local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120})) n
    for n in "$@"; do
        local log="$cache/cluster-node$n/broker.log" pid
        pid="$(cat "$cache/cluster-node$n.pid")"
        until grep -q "Kafka Server started" "$log"; do
            if ! kill -0 "$pid" 2>/dev/null; then
                tail -n 30 "$log" >&2
                echo "kafka cluster: node $n exited during start-up; log: $log" >&2
                exit 1
            fi
            if ((SECONDS > deadline)); then
                tail -n 30 "$log" >&2
                echo "kafka cluster: node $n not ready after ${KAFKA_START_TIMEOUT:-120}s; log: $log" >&2
                exit 1
            fi
            sleep 0.2
        done
    done
}

up() {
    local n
    for n in "${nodes[@]}"; do
        if KAFKA_INSTANCE="cluster-node$n" bash "$here/broker.sh" status >/dev/null 2>&1; then
            echo "kafka cluster: node $n is running already; \`$0 down\` first" >&2
            exit 1
        fi
    done
    bash "$here/fetch.sh"
    mkdir -p "$cache"
    local ports cluster_id
    # 2 x 3 free ports held open together (so they differ); the nodes' overrides from the tests' helper
    ports="$(python3 -c 'import socket
s = [socket.socket() for _ in range(6)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')"
    read -r -a port <<<"$ports"
    cluster_id="-"
    while [[ "$cluster_id" == -* ]]; do
        cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    for n in "${nodes[@]}"; do
        PYTHONPATH="$repo" python3 -c 'import sys
from tests.support.kafka_cluster import cluster_properties
p = [int(x) for x in sys.argv[2:]]
ports = {n: (p[2 * (n - 1)], p[2 * (n - 1) + 1]) for n in (1, 2, 3)}
print("".join(f"{k}={v}\n" for k, v in cluster_properties(int(sys.argv[1]), ports).items()), end="")' \
            "$n" "${port[@]}" >"$cache/cluster-node$n.properties"
        printf 'export KAFKA_PORT=%s KAFKA_CONTROLLER_PORT=%s KAFKA_CLUSTER_ID=%s\n' \
            "${port[2 * (n - 1)]}" "${port[2 * (n - 1) + 1]}" "$cluster_id" >"$cache/cluster-node$n.env"
        rm -rf "$cache/cluster-node$n/data"
        node "$n" env KAFKA_WAIT=0 KAFKA_KEEP_DATA=0 bash "$here/broker.sh" up
    done
    wait_serving "${nodes[@]}"
    echo "127.0.0.1:${port[0]},127.0.0.1:${port[2]},127.0.0.1:${port[4]}" >"$cache/cluster.address"
    echo "kafka://$(cat "$cache/cluster.address")?replication_factor=3&min_insync_replicas=2" >"$cache/cluster.url"
    echo "kafka cluster: 3 nodes serving at $(cat "$cache/cluster.address"); bus URL in ${cache#"$PWD/"}/cluster.url"
}

down() {
    local n pids=()
    for n in "${nodes[@]}"; do  # together: a node stopped last would wait for a quorum that is gone
        node "$n" bash "$here/broker.sh" down &
        pids+=($!)
    done
    wait "${pids[@]}"
    rm -f "$cache/cluster.address" "$cache/cluster.url"
}

status() {
    local n code=0
    for n in "${nodes[@]}"; do
        echo -n "node $n: "
        KAFKA_INSTANCE="cluster-node$n" bash "$here/broker.sh" status || code=1
    done
    return "$code"
}

check_node() {
    [[ "${1:-}" =~ ^[123]$ ]] || { echo "usage: $0 kill|restart 1|2|3" >&2; exit 2; }
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    kill)
        check_node "${2:-}"
        pid="$(cat "$cache/cluster-node$2.pid" 2>/dev/null || true)"
        if [[ -n "$pid" ]] && KAFKA_INSTANCE="cluster-node$2" bash "$here/broker.sh" status >/dev/null; then
            kill -KILL "$pid"
            echo "kafka cluster: node $2 killed (pid $pid)"
        else
            echo "kafka cluster: node $2 is not running" >&2
            exit 1
        fi
        ;;
    restart)
        check_node "${2:-}"
        node "$2" env KAFKA_WAIT=0 KAFKA_KEEP_DATA=1 bash "$here/broker.sh" up
        wait_serving "$2"
        echo "kafka cluster: node $2 serving again"
        ;;
    *) echo "usage: $0 up|down|status|kill N|restart N" >&2; exit 2 ;;
esac
