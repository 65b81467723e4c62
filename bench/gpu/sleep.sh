#!/usr/bin/env bash
# Issue 17 item 7 on the lent H200 (the `run` tool, kind nvidia-h200): three on-demand Llama-2-7B-shaped
# models on one card, only two fit awake (fleet-sleep.yaml), under the real supervisor (vLLM sleep mode:
# llama-a, llama-b at level 1 with dummy weights; llama-c at level 2 with random safetensors written here),
# two gateways and Redis; python -m bench.gpu.sleep_bench drives the load and writes the results.
# Prepared HERE first (bench/gpu/README.md): .c1/ .c2/ (../shared/gpu/build_carry.sh), .whl2/
# (bench/gpu/prepare.sh), and this branch's code copied to .g17/ (`run` sends /work/main's tree):
#   git archive HEAD | tar -x -C /work/main/.g17/     (with /.g17/ in /work/main/.git/info/exclude)
# Then, calls back to back (a machine goes back 30 s after a call):
#   1. carry [.c1]               bash .g17/bench/gpu/sleep.sh unpack1
#   2. carry [.c2, .whl2, .g17]  bash .g17/bench/gpu/sleep.sh start && bash .g17/bench/gpu/sleep.sh wait 540
#   3. (no carry)                bash .g17/bench/gpu/sleep.sh wait 570     (again until DRIVER DONE)
# Here, without a GPU: `bash bench/gpu/sleep.sh dry` runs the same driver against FAKE GPU ENGINES and a
# FAKE nvidia-smi (testing/fake_nvidia_smi.py), with the fleet's paths and a short load.
set -uo pipefail
PHASE=${1:?phase: unpack1 | start | wait SECONDS | driver | dry | stop}
PY=${PY:-python3}
WORKERS=${WORKERS:-workers.cli}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver, recipe, fresh_run, ...
recipe sleep 6381  # SRC, APP, RUN, REDIS_PORT, ...; the GPU environment
[ "$PHASE" = dry ] || cd "$(carry_root "$SRC")" || exit 1


bench() {  # the stack, then the load; BENCH_ARGS shorten it (dry)
  FLEET=$RUN/fleet-sleep.yaml
  say "gpu idle: $(smi)"
  $PY -c "from $WORKERS import main; raise SystemExit(main())" --fleet $FLEET --redis-url $REDIS_URL \
    --log-dir $RUN/logs --devices 1 --metrics-port ${METRICS_PORT:-9400} --ready-deadline 900 \
    --state-file $RUN/workers-state.json > $RUN/supervisor.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  run_gateway ${GW1:-9000} gw1; run_gateway ${GW2:-9001} gw2
  wait_http http://127.0.0.1:${GW1:-9000}/health 60 && wait_http http://127.0.0.1:${GW2:-9001}/health 60 || return 1
  $PY -m bench.gpu.sleep_bench --gateways http://127.0.0.1:${GW1:-9000},http://127.0.0.1:${GW2:-9001} \
    --supervisor-log $RUN/supervisor.log --out $RUN/results ${BENCH_ARGS:-} 2>&1 | tee $RUN/bench.log
  say "bench done: gpu $(smi)"
  grep -E "waking|awake in|asleep \(|vllm (sleep|wake)|wake failed|cannot wake|keeps|Traceback" $RUN/supervisor.log | cut -c1-260
  stop_pidfile $RUN/gateway-gw1.pid; stop_pidfile $RUN/gateway-gw2.pid; stop_pidfile $RUN/supervisor.pid
  say "stack stopped: gpu $(smi)"
}

case "$PHASE" in
unpack1)
  mkdir -p $VLLM && untar $VLLM .c1/*.tar.xz
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 -V; free -g | head -2
  ;;
start)
  install_run || exit 1
  cp "$SRC"/bench/gpu/fleet-sleep.yaml $RUN/fleet-sleep.yaml
  lay_out_model llama-2-7b
  check_imports tenacity || exit 1
  write_real_weights || exit 1
  setsid bash $APP/bench/gpu/sleep.sh driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  start_redis $REDIS_PORT || { say "DRIVER DONE"; exit 1; }
  bench || say "BENCH FAILED"
  stop_pidfile $RUN/redis.pid
  say "DRIVER DONE"
  ;;
dry)  # here, no GPU: FAKE GPU ENGINES + FAKE nvidia-smi, a private Redis, the same driver (short load)
  export APP=$SRC RUN=${RUN_DRY:-/tmp/i17gpu-dry} PY=$SRC/.venv/bin/python WORKERS=testing.fake_workers
  export PYTHONPATH=$SRC LLMGW_FAKE_GPU=1 FAKE_GPU_MEMORY_DIR=$RUN/gpu-mem FAKE_GPU_BASELINE_MIB=0
  rm -rf $RUN && mkdir -p $RUN/bin $RUN/gpu-mem $RUN/results
  printf '#!/bin/sh\nexec %s -m testing.fake_nvidia_smi "$@"\n' "$PY" > $RUN/bin/nvidia-smi && chmod +x $RUN/bin/nvidia-smi
  export PATH=$RUN/bin:$PATH
  sed -e "s#/tmp/gpu-models/#$RUN/models/#" -e "s/base_port: 8100/base_port: 18100/" \
    "$SRC"/bench/gpu/fleet-sleep.yaml > $RUN/fleet-sleep.yaml
  # the fake engine answers 16 tokens unless asked: --tokens is what max_tokens overrides anyway
  export REDIS_PORT=16390 METRICS_PORT=19400 GW1=19000 GW2=19001 REDIS_URL=redis://127.0.0.1:16390/0
  redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no > $RUN/redis.log 2>&1 &
  echo $! > $RUN/redis.pid
  cd "$SRC" && BENCH_ARGS="--rounds 1 --burst-n 8 --tokens 8 --words 20 --swap-reps 1 --settle-s 60" bench
  stop_pidfile $RUN/redis.pid
  ;;
wait)
  follow_driver $RUN/driver.log ${2:-540}
  cp $RUN/results/summary.md $RUN/results/sleep.json "$OUT/" 2>/dev/null
  pack_logs "$OUT/logs.tar.gz" "$RUN/*.log" "$RUN/logs/*.log" "$RUN/results/*"
  ls -la "$OUT"
  ;;
stop)
  for f in $RUN/gateway-*.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
