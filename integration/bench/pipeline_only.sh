#!/usr/bin/env bash
# The reconcile pipeline alone: one server and two noop workers work off a
# backlog of queued resources with no applies competing; prints the seconds
# until the queue is empty, and with TOP=N the N costliest statements (needs
# pg_stat_statements with track = all on the cluster).
#
#   pipeline_only.sh BIN_DIR TEMPLATE_DB [LABEL]
#
# BIN_DIR holds release builds of converge and converge-noop-worker.
# TEMPLATE_DB is a database on the cluster at $PGHOST:$PGPORT (user $PGUSER)
# holding the backlog; make it once with
#   converge-load --resources 100000 --workers 0 --pgbench-secs 0 \
#       --database-url postgres://USER@HOST:PORT/TEMPLATE_DB
# and stop that once it prints "applied 100000/100000". Each run works on a
# fresh copy (CREATE DATABASE … TEMPLATE), so runs of two builds compare.
set -euo pipefail
bin=$(cd "$1" && pwd); template=$2; label=${3:-run}
db="pipeline_${label}"; port=${PORT:-50071}
url="postgres://${PGUSER:-postgres}@${PGHOST:-127.0.0.1}:${PGPORT:-5432}/$db"
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

psql_q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db TEMPLATE $template"
if [ -n "${TOP:-}" ]; then psql_q -d postgres -c "SELECT pg_stat_statements_reset()" >/dev/null; fi
"$bin/converge" serve --database-url "$url" --listen-addr "127.0.0.1:$port" --health-addr 127.0.0.1:0 >"/tmp/pipeline_$label.server.log" 2>&1 &
pids=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
sleep 1.5
started=$(date +%s.%N)
for i in 1 2; do
  "$bin/converge-noop-worker" --broker "http://127.0.0.1:$port" --max-parallel 256 \
    >"/tmp/pipeline_$label.worker$i.log" 2>&1 &
  pids+=($!)
done
until [ "$(psql_q -At -d "$db" -c 'SELECT NOT EXISTS (SELECT 1 FROM work_queue)')" = t ]; do sleep 0.5; done
echo "$label: $(echo "$(date +%s.%N) - $started" | bc) s"
if [ -n "${TOP:-}" ]; then
  psql_q -d postgres -c "SELECT calls, round(total_exec_time::numeric) AS total_ms,
      round(mean_exec_time::numeric, 3) AS mean_ms, toplevel, rows,
      left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS query
    FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
    WHERE d.datname = '$db' ORDER BY total_exec_time DESC LIMIT $TOP"
fi
