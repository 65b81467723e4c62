#!/usr/bin/env bash
# Issue 30 on the lent H200 (the `run` tool, kind nvidia-h200), from any directory (bench/gpu/README.md):
# two replicas of the Llama-2-7B shape (random weights, fleet-prefix.yaml's budgets, round robin), one
# gateway with migration on, `python -m bench.migration_check`: 64 streams of 200 tokens at temperature 0,
# undisturbed, then with one replica killed (-9) mid-stream: errors, byte-identical texts, stalls.
# Calls back to back (a machine goes back 30 s after a call):
#   1. carry [.c1]          bash bench/gpu/migration.sh unpack1
#   2. carry [.c2, .whl2]   bash bench/gpu/migration.sh start && bash bench/gpu/migration.sh wait 540
#   3. (no carry)           bash bench/gpu/migration.sh wait 560     (again until it prints DRIVER DONE)
# STREAMS (64) and TOKENS (200) in `start` change the load; FAULTS="kill stop" adds a frozen replica.
set -uo pipefail
PHASE=${1:?phase: unpack1 | start | wait SECONDS | driver | stop}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver, recipe, fresh_run, ...
recipe migration 6382  # SRC, APP, RUN, REDIS_PORT, ...; the GPU environment
cd "$(carry_root "$SRC")" || exit 1

driver() {
  sed -E "s/^( *)policy: .*/\1policy: round_robin/" $APP/bench/gpu/fleet-prefix.yaml > $RUN/fleet.yaml
  python3 -c "from workers.cli import main; raise SystemExit(main())" --fleet $RUN/fleet.yaml \
    --redis-url $REDIS_URL --log-dir $RUN/logs --devices 1 --metrics-port 9400 --ready-deadline 900 \
    > $RUN/supervisor.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  python3 -c "from gateway.cli import main; raise SystemExit(main())" --fleet $RUN/fleet.yaml \
    --redis-url $REDIS_URL --port 9000 --gateway-id gw1 > $RUN/gateway.log 2>&1 &
  echo $! > $RUN/gateway.pid
  for _ in $(seq 1 900); do
    [ "$(grep -c ' ready in ' $RUN/supervisor.log)" -ge 2 ] && break
    grep -qE "STOPPED|NOT STARTED|Traceback" $RUN/supervisor.log && { say "supervisor failed"; return 1; }
    sleep 1
  done
  say "two replicas ready: gpu $(smi)"
  local faults=""; for f in ${FAULTS:-kill}; do faults="$faults --fault $f"; done
  python3 -m bench.migration_check --url http://127.0.0.1:9000 --model llama-2-7b --replica-ports 8100,8101 \
    --streams "${STREAMS:-64}" --tokens "${TOKENS:-200}" $faults --out $RUN/results/migration.json 2>&1 \
    | tee $RUN/check.log
  grep -c "migration moved" $RUN/gateway.log | xargs echo "gateway log lines 'migration moved':"
}

case "$PHASE" in
unpack1)
  unpack_c1
  ;;
start)
  install_run || exit 1
  lay_out_model llama-2-7b
  check_imports psutil || exit 1
  STREAMS=${STREAMS:-64} TOKENS=${TOKENS:-200} FAULTS=${FAULTS:-kill} \
    setsid bash $APP/bench/gpu/migration.sh driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  start_redis $REDIS_PORT || { say "DRIVER DONE"; exit 1; }
  driver || say "MIGRATION CHECK FAILED"
  for f in $RUN/gateway.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  say "DRIVER DONE"
  ;;
wait)
  follow_driver $RUN/driver.log ${2:-540}
  cp $RUN/results/migration.json "$OUT/" 2>/dev/null
  pack_logs "$OUT/logs.tar.gz" "$RUN/*.log" "$RUN/logs/*.log"
  ls -la "$OUT"
  ;;
stop)
  for f in $RUN/gateway.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
