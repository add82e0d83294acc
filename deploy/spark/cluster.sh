#!/usr/bin/env bash
# A local Spark standalone cluster for development and tests: one master and $SPARK_WORKERS workers
# (default 2), each a separate JVM started from pyspark's own jars (SPARK_HOME = the installed pyspark
# package; nothing is downloaded), bound to $SPARK_CLUSTER_HOST (default 127.0.0.1) on free ports.
#
#   deploy/spark/cluster.sh up       start the master, then the workers; wait until each worker registered
#   deploy/spark/cluster.sh down     stop the workers, then the master, by pid (SIGTERM, SIGKILL after
#                                    $SPARK_STOP_TIMEOUT s, default 20)
#   deploy/spark/cluster.sh status   print the pids and the master URL; exit 1 when the master is not running
#
# State goes to $SPARK_CLUSTER_DIR (default deploy/spark/.cache): master.pid, worker-N.pid, master.url
# (spark://host:port, what --spark-master takes), master.webui (http://host:port), logs/ and work/
# (the executors' directories). Each worker offers $SPARK_WORKER_CORES cores (default 1) and
# $SPARK_WORKER_MEMORY (default 1g); daemons' heap $SPARK_DAEMON_MEMORY (default 256m).
# Python on the executors: $PYSPARK_PYTHON, default this venv's (programs' drivers name their own).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${SPARK_CLUSTER_DIR:-$here/.cache}"
host="${SPARK_CLUSTER_HOST:-127.0.0.1}"
workers="${SPARK_WORKERS:-2}"
python="${PYSPARK_PYTHON:-$repo/.venv/bin/python}"

spark_home() {
    "$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'
}

free_port() {
    "$python" -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1]); s.close()' "$host"
}

running_pid() {  # the pid in file $1 if it is alive and still runs class $2 (a recycled pid is not ours)
    [[ -f "$1" ]] || return 1
    local pid
    pid="$(cat "$1")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$2" \
        && echo "$pid"
}

wait_for() {  # wait until log $1 says $2, while pid $3 lives; $4 names it
    local deadline=$((SECONDS + ${SPARK_START_TIMEOUT:-120}))
    until grep -q "$2" "$1" 2>/dev/null; do
        if ! kill -0 "$3" 2>/dev/null; then
            tail -n 30 "$1" >&2
            echo "spark: the $4 exited during start-up; log: $1" >&2
            return 1
        fi
        if ((SECONDS > deadline)); then
            tail -n 30 "$1" >&2
            echo "spark: the $4 is not ready after ${SPARK_START_TIMEOUT:-120}s; log: $1" >&2
            return 1
        fi
        sleep 0.2
    done
}

start() {  # start() NAME CLASS ARGS...: a JVM of its own session, pid in $state/NAME.pid
    local name="$1"; shift
    local log="$state/logs/$name.log"
    : >"$log"
    SPARK_HOME="$home" SPARK_LOCAL_IP="$host" SPARK_DAEMON_MEMORY="${SPARK_DAEMON_MEMORY:-256m}" \
        PYSPARK_PYTHON="$python" SPARK_NO_DAEMONIZE=1 \
        setsid nohup "$home/bin/spark-class" "$@" >>"$log" 2>&1 </dev/null &
    echo $! >"$state/$name.pid"
}

up() {
    if pid="$(running_pid "$state/master.pid" deploy.master.Master)"; then
        echo "spark: already running (master pid $pid) at $(cat "$state/master.url")"
        return 0
    fi
    command -v java >/dev/null || { echo "spark: java (17+) is required" >&2; exit 1; }
    home="$(spark_home)"
    mkdir -p "$state/logs" "$state/work"
    local port webui_port
    port="$(free_port)" webui_port="$(free_port)"
    start master org.apache.spark.deploy.master.Master --host "$host" --port "$port" --webui-port "$webui_port"
    echo "spark://$host:$port" >"$state/master.url"
    echo "http://$host:$webui_port" >"$state/master.webui"
    wait_for "$state/logs/master.log" "I have been elected leader" "$(cat "$state/master.pid")" master || { down >&2; exit 1; }
    for n in $(seq 1 "$workers"); do
        mkdir -p "$state/work/worker-$n"
        start "worker-$n" org.apache.spark.deploy.worker.Worker "spark://$host:$port" --host "$host" \
            --port "$(free_port)" --webui-port "$(free_port)" --cores "${SPARK_WORKER_CORES:-1}" \
            --memory "${SPARK_WORKER_MEMORY:-1g}" --work-dir "$state/work/worker-$n"
    done
    for n in $(seq 1 "$workers"); do
        wait_for "$state/logs/worker-$n.log" "Successfully registered with master" "$(cat "$state/worker-$n.pid")" \
            "worker $n" || { down >&2; exit 1; }
    done
    echo "spark: master (pid $(cat "$state/master.pid")) at spark://$host:$port, UI http://$host:$webui_port;" \
         "$workers workers; logs: ${state#"$PWD/"}/logs"
}

stop() {  # stop() NAME CLASS
    local pid_file="$state/$1.pid" pid
    if ! pid="$(running_pid "$pid_file" "$2")"; then
        rm -f "$pid_file"
        return 0
    fi
    kill -TERM "$pid"
    local deadline=$((SECONDS + ${SPARK_STOP_TIMEOUT:-20}))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS > deadline)); then
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    rm -f "$pid_file"
    echo "spark: stopped $1 (pid $pid)"
}

down() {
    local file
    for file in "$state"/worker-*.pid; do
        [[ -e "$file" ]] || continue
        stop "$(basename "$file" .pid)" deploy.worker.Worker
    done
    stop master deploy.master.Master
    rm -f "$state/master.url" "$state/master.webui"
}

status() {
    local pid file
    if ! pid="$(running_pid "$state/master.pid" deploy.master.Master)"; then
        echo "spark: not running"
        return 1
    fi
    echo "spark: master (pid $pid) at $(cat "$state/master.url"), UI $(cat "$state/master.webui")"
    for file in "$state"/worker-*.pid; do
        [[ -e "$file" ]] || continue
        if pid="$(running_pid "$file" deploy.worker.Worker)"; then
            echo "spark: $(basename "$file" .pid) (pid $pid)"
        else
            echo "spark: $(basename "$file" .pid) not running"
        fi
    done
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
