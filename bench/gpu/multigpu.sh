#!/usr/bin/env bash
# Issue 35 on two GPUs of one host (the `run` tool, kind nvidia-h200-x2): bench/gpu/fleet-multigpu.yaml under
# the real supervisor (one model per GPU, spread by the supervisor; one at tensor_parallel_size 2 across
# both), Redis and a gateway; then the recipe's steps (bench/gpu/multigpu_check.py): every replica ready,
# each on the devices of the one placement and seeing exactly those (CUDA_VISIBLE_DEVICES) with NVLink
# multicast off, requests through the gateway to every model, a replica on GPU 0 killed while GPU 1's model
# serves with 0 errors, and a fleet the GPUs cannot place refused at start.
# NVLink multicast is off in every process started here (the exports below; the supervisor sets the same
# three in each vLLM replica's environment).
# On the lent machine (prepared as in bench/gpu/README.md; the code copied to .g35/):
#   1. carry [.c1]               bash .g35/bench/gpu/multigpu.sh unpack1
#   2. carry [.c2, .whl2, .g35]  bash .g35/bench/gpu/multigpu.sh start && bash .g35/bench/gpu/multigpu.sh wait 540
# Here, without a GPU: `bash bench/gpu/multigpu.sh dry` runs the same steps against FAKE GPU ENGINES and a
# FAKE nvidia-smi reporting two devices (testing/fake_nvidia_smi.py), on free ports; exit 0 when every step
# passes.
set -uo pipefail
PHASE=${1:?phase: unpack1 | start | wait SECONDS | driver | dry | stop}
SRC=$(cd "$(dirname "$0")/../.." && pwd)   # the tree this script is in (.g35 on the device)
APP=${APP:-/tmp/app} RUN=${RUN:-/tmp/run35} VLLM=/tmp/vllm SITE=/tmp/site MODELS=/tmp/gpu-models
export PYTHONPATH=$APP:$SITE:$VLLM PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PY:-python3}
WORKERS=${WORKERS:-workers.cli}
READY_S=${READY_S:-900}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver

free_port() { $PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
check() { $PY -m bench.gpu.multigpu_check "$@"; }

steps() {  # the recipe: FLEET, REDIS_URL set; returns non-zero at the first step that fails
  local gw_port metrics_port gw
  gw_port=$(free_port); metrics_port=$(free_port); gw=http://127.0.0.1:$gw_port
  say "gpus idle: $(smi | tr '\n' ' ')"
  $PY -c "from $WORKERS import main; raise SystemExit(main())" --fleet "$FLEET" --redis-url "$REDIS_URL" \
    --log-dir $RUN/logs --metrics-port "$metrics_port" --ready-deadline "$READY_S" \
    --state-file $RUN/workers-state.json > $RUN/supervisor.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  $PY -c "from gateway.cli import main; raise SystemExit(main())" --fleet "$FLEET" --redis-url "$REDIS_URL" \
    --port "$gw_port" --gateway-id gw1 > $RUN/gateway.log 2>&1 &
  echo $! > $RUN/gateway.pid
  say "step 1: every replica ready" && check ready --state $RUN/workers-state.json --want 3 --deadline "$READY_S" || return 1
  say "gpus loaded: $(smi | tr '\n' ' ')"
  say "step 2: placement held on the cards" && check placement --state $RUN/workers-state.json --fleet "$FLEET" || return 1
  check health --url "$gw/health" --deadline 60 || return 1
  say "step 3: every model through the gateway"
  for m in llama qwen2 gemma-tp2; do check routable --gateway "$gw" --model $m || return 1; done
  for m in llama qwen2 gemma-tp2; do check load --gateway "$gw" --model $m --n ${LOAD_N:-16} || return 1; done
  say "step 4: a replica on GPU 0 killed, GPU 1's model keeps serving"
  check load --gateway "$gw" --model qwen2 --n ${KILL_LOAD_N:-64} > $RUN/load-during-kill.log 2>&1 &
  local load=$!
  check kill --state $RUN/workers-state.json --id llama-0 || return 1
  wait $load; local rc=$?; cat $RUN/load-during-kill.log; [ $rc -eq 0 ] || return 1
  stop_pidfile $RUN/gateway.pid; stop_pidfile $RUN/supervisor.pid
  say "step 5: a fleet the GPUs cannot place is refused at start"
  sed -e 's/tensor_parallel_size: 2}/tensor_parallel_size: 2}\n    placement: {devices: [1, 2]}/' "$FLEET" > $RUN/fleet-unplaceable.yaml
  timeout 60 $PY -c "from $WORKERS import main; raise SystemExit(main())" --fleet $RUN/fleet-unplaceable.yaml \
    --redis-url "$REDIS_URL" --log-dir $RUN/logs --state-file $RUN/refused-state.json > $RUN/refused.log 2>&1
  rc=$?; cat $RUN/refused.log
  [ $rc -eq 2 ] && grep -q "model 'gemma-tp2' replica 0: placement.devices puts it on gpu 1,2" $RUN/refused.log || return 1
  say "ALL STEPS PASSED"
}

case "$PHASE" in
unpack1)
  mkdir -p $VLLM && untar $VLLM .c1/*.tar.xz
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; python3 -V
  ;;
start)
  mkdir -p $VLLM $RUN/logs && untar $VLLM .c2/*.tar.xz
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .whl2/*.whl || exit 1
  untar /tmp .whl2/redis7.tar.xz
  rm -rf $APP && mkdir -p $APP && cp -r "$SRC"/llmgw_contract "$SRC"/gateway "$SRC"/workers "$SRC"/bench $APP/
  cp "$SRC"/bench/gpu/fleet-multigpu.yaml $RUN/fleet-multigpu.yaml
  for m in llama-2-7b qwen2-7b gemma-7b; do
    mkdir -p $MODELS/$m && cp "$SRC"/bench/gpu/configs/$m/config.json $MODELS/$m/
  done
  cp .c2/tok/* $MODELS/llama-2-7b/ 2>/dev/null
  setsid bash $APP/bench/gpu/multigpu.sh driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  R=/tmp/r7; LIBS=$R/lib; REDIS_PORT=$(free_port)
  LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no \
    > $RUN/redis.log 2>&1 &
  FLEET=$RUN/fleet-multigpu.yaml REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0 steps || say "STEPS FAILED"
  say "DRIVER DONE"
  ;;
dry)  # here, no GPU: FAKE GPU ENGINES + a FAKE nvidia-smi with two devices, a private Redis, short loads
  export APP=$SRC RUN=${RUN_DRY:-$(mktemp -d /tmp/multigpu-dry.XXXXXX)} PY=${PY_DRY:-$SRC/.venv/bin/python}
  export PYTHONPATH=$SRC WORKERS=testing.fake_workers LLMGW_FAKE_GPU=1 READY_S=60 LOAD_N=8 KILL_LOAD_N=32
  export FAKE_GPU_COUNT=2 FAKE_GPU_MEMORY_DIR=$RUN/gpu-mem FAKE_GPU_BASELINE_MIB=0
  mkdir -p $RUN/bin $RUN/gpu-mem $RUN/logs
  $PY -c "from pathlib import Path; from testing.fake_nvidia_smi import install; install(Path('$RUN/bin'))"
  export PATH=$RUN/bin:$PATH
  base=$(free_port)
  sed -e "s#/tmp/gpu-models/#$SRC/bench/gpu/configs/#" -e "s/base_port: 8100/base_port: $base/" \
    "$SRC"/bench/gpu/fleet-multigpu.yaml > $RUN/fleet-multigpu.yaml
  REDIS_PORT=$(free_port)
  redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no > $RUN/redis.log 2>&1 &
  echo $! > $RUN/redis.pid
  cd "$SRC" && FLEET=$RUN/fleet-multigpu.yaml REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0 steps; rc=$?
  for f in $RUN/gateway.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  [ $rc -eq 0 ] || say "DRY RUN FAILED (logs in $RUN)"
  exit $rc
  ;;
wait)
  follow_driver $RUN/driver.log ${2:-540}
  cp $RUN/*.log "$OUT/" 2>/dev/null; cp $RUN/logs/*.log "$OUT/" 2>/dev/null
  ls -la "$OUT"
  ;;
stop)
  for f in $RUN/gateway.pid $RUN/supervisor.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
