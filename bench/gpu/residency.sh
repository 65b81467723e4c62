#!/usr/bin/env bash
# Issue 44 on the lent GPU (the `run` tool): the residency trace (bench/residency/trace.py, 8 models, 10
# trace minutes at time scale 1.0) replayed through one gateway to the REAL supervisor running eight
# on-demand Llama-2-7B-shaped models with vLLM sleep mode and the default autopilot (fleet-residency.yaml),
# Redis from .whl2. `python -m bench.residency.gpu` (the live replay of bench/residency/live.py) records per
# request the model, its state on arrival (registry + the supervisor's log), TTFT and error, and the
# ledger's prediction against nvidia-smi at every wake and sleep (the supervisor's own log lines).
# Prepared HERE first (bench/gpu/README.md): .c1/ .c2/ (../shared/gpu/build_carry.sh), .whl2/
# (bench/gpu/prepare.sh), and, unless this code is on main already, the branch's code copied to .g44/ (`run`
# sends /work/main's tree; /.g44/ in its .git/info/exclude):
#   rm -rf .g44 && mkdir .g44 && git -C BRANCH_CHECKOUT archive HEAD llmgw_contract gateway workers bench \
#     testing llmgw_tools | tar -x -C .g44 --exclude='*/results'
# Then, calls back to back (a machine goes back 30 s after a call):
#   1. carry [.c1]               bash bench/gpu/sleep.sh unpack1     (/tmp/vllm: .c1 leaves little room for .g44)
#   2. carry [.c2, .whl2, .g44]  bash .g44/bench/gpu/residency.sh start && bash .g44/bench/gpu/residency.sh wait 480
#   3. (no carry)                bash .g44/bench/gpu/residency.sh wait 570     (again until DRIVER DONE)
# `start` options (environment): WEIGHTS=real (default: random bf16 safetensors written on the device, one
# folder for all eight: level 2 reloads them) or dummy (vLLM's dummy weights: level 1 or stopped);
# ARM=autopilot (default) or today (defaults.autopilot: false); REPLAY_ARGS (more bench.residency.gpu flags).
# Here, without a GPU: `bash bench/gpu/residency.sh dry` runs the same driver against FAKE GPU ENGINES taught
# the H200 (--profile h200, DRY_SCALE 0.1), a FAKE nvidia-smi and a 120-trace-second short trace.
set -uo pipefail
PHASE=${1:?phase: unpack1 | start | wait SECONDS | driver | dry | stop}
PY=${PY:-python3}
WORKERS=${WORKERS:-workers.cli}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver, recipe, run_gateway, wait_http, ...
recipe residency 6383  # SRC, APP, RUN, REDIS_PORT, ...; the GPU environment
[ "$PHASE" = dry ] || cd "$(carry_root "$SRC")" || exit 1
GW=${GW:-9000}

fleet() {  # fleet SRC DST [DRY_SCALE MODELS_DIR BASE_PORT DELAY_MS]: the fleet as this run serves it
  $PY - "$@" "${WEIGHTS:-real}" "${ARM:-autopilot}" <<'PYEOF'
import sys
from pathlib import Path
from bench.residency.gpu import dry_fleet, fleet_for
src, dst, *dry, weights, arm = sys.argv[1:]
text = fleet_for(Path(src).read_text(), weights, arm)
if dry:
    text = dry_fleet(text, float(dry[0]), dry[1], int(dry[2]), float(dry[3]))
Path(dst).write_text(text)
PYEOF
}

replay() {  # the stack (supervisor, one gateway), the replay, the stack stopped; REPLAY_ARGS shorten it (dry)
  FLEET=$RUN/fleet.yaml
  say "gpu idle: $(smi)"; uptime
  $PY -c "from $WORKERS import main; raise SystemExit(main())" --fleet $FLEET --redis-url $REDIS_URL \
    --log-dir $RUN/logs --devices 1 --metrics-port ${METRICS_PORT:-9400} --ready-deadline 900 \
    --state-file $RUN/workers-state.json > $RUN/supervisor.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  run_gateway $GW gw1
  wait_http http://127.0.0.1:$GW/health 60 || return 1
  $PY -m bench.residency.gpu --gateway http://127.0.0.1:$GW --redis-url $REDIS_URL --arm "${ARM:-autopilot}" \
    --supervisor-log $RUN/supervisor.log --fleet $FLEET --out $RUN/results ${REPLAY_ARGS:-} 2>&1 | tee $RUN/replay.log
  local rc=${PIPESTATUS[0]}
  say "replay done (exit $rc): gpu $(smi)"; uptime
  grep -c "autopilot gpu" $RUN/supervisor.log | sed 's/^/autopilot moves: /'
  grep -E "cannot wake|wake failed|NOT STARTED|failed|Traceback" $RUN/supervisor.log | head -20 | cut -c1-260
  stop_pidfile $RUN/gateway-gw1.pid; stop_pidfile $RUN/supervisor.pid
  say "stack stopped: gpu $(smi)"
  return "$rc"
}

case "$PHASE" in
unpack1)
  unpack_c1; free -g | head -2
  ;;
start)
  install_run || exit 1
  cp -r "$SRC"/llmgw_tools "$SRC"/testing $APP/  # bench.residency imports testing (poll, procs, gpu_profile)
  lay_out_model llama-2-7b
  (cd $APP && fleet "$SRC"/bench/gpu/fleet-residency.yaml $RUN/fleet.yaml) || exit 1
  check_imports "tenacity, bench.residency.gpu" || exit 1
  if [ "${WEIGHTS:-real}" = real ]; then write_real_weights || exit 1; fi
  df -h /tmp | tail -1; free -g | head -2
  ARM=${ARM:-autopilot} REPLAY_ARGS=${REPLAY_ARGS:-} setsid bash $APP/bench/gpu/residency.sh driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  start_redis $REDIS_PORT || { say "DRIVER DONE"; exit 1; }
  replay || say "REPLAY FAILED"
  stop_pidfile $RUN/redis.pid
  say "DRIVER DONE"
  ;;
wait)
  follow_driver $RUN/driver.log ${2:-540}
  cp $RUN/results/residency-gpu.json $RUN/results/summary.md $RUN/supervisor.log "$OUT/" 2>/dev/null
  pack_logs "$OUT/logs.tar.gz" "$RUN/*.log" "$RUN/logs/*.log" "$RUN/logs/*/*.log" "$RUN/fleet.yaml"
  ls -la "$OUT"
  ;;
stop)
  for f in $RUN/gateway-*.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
dry)  # here, no GPU: FAKE GPU ENGINES taught the H200 + FAKE nvidia-smi, a private Redis, the same driver
  export APP=$SRC RUN=${RUN_DRY:-/tmp/residency-dry} PY=${PY_DRY:-$SRC/.venv/bin/python} WORKERS=testing.fake_workers
  export PYTHONPATH=$SRC LLMGW_FAKE_GPU=1 FAKE_GPU_MEMORY_DIR=$RUN/gpu-mem FAKE_GPU_BASELINE_MIB=0
  fresh_run && mkdir -p $RUN/bin $RUN/gpu-mem $RUN/models/llama-2-7b-real
  printf '#!/bin/sh\nexec %s -m testing.fake_nvidia_smi "$@"\n' "$PY" > $RUN/bin/nvidia-smi && chmod +x $RUN/bin/nvidia-smi
  cp "$SRC"/bench/gpu/configs/llama-2-7b/config.json $RUN/models/llama-2-7b-real/
  K=${DRY_SCALE:-0.1} TOKENS=${DRY_TOKENS:-8}
  export PATH=$RUN/bin:$PATH GW=19744 METRICS_PORT=19745 REDIS_PORT=16744 REDIS_URL=redis://127.0.0.1:16744/0
  # the trace's 2 s of decode per request, at the time scale: the FAKE ENGINE's pace per token
  fleet "$SRC"/bench/gpu/fleet-residency.yaml $RUN/fleet.yaml $K $RUN/models 18700 "$($PY -c "print(2000 * $K / $TOKENS)")" || exit 1
  export REPLAY_ARGS="--time-scale $K --duration ${DRY_DURATION:-120} --short --tokens $TOKENS --settle-s 30 --smi-every-s 1"
  redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no > $RUN/redis.log 2>&1 &
  echo $! > $RUN/redis.pid
  cd "$SRC" || exit 1
  replay; rc=$?
  stop_pidfile $RUN/redis.pid
  say "DRIVER DONE"
  exit $rc
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
