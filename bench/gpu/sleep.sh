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
SRC=$(cd "$(dirname "$0")/../.." && pwd)   # the tree this script is in (.g17 on the device)
APP=${APP:-/tmp/app} RUN=${RUN:-/tmp/run} VLLM=/tmp/vllm SITE=/tmp/site MODELS=/tmp/gpu-models
export PYTHONPATH=$APP:$SITE:$VLLM PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
PY=${PY:-python3}
WORKERS=${WORKERS:-workers.cli}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver


write_real_weights() {  # random bf16 safetensors of the Llama-2-7B shape (level 2 reloads from disk)
  mkdir -p $MODELS/llama-2-7b-real && cp $MODELS/llama-2-7b/* $MODELS/llama-2-7b-real/
  $PY - <<'PYEOF'
import glob, os, time, torch, transformers
t = time.time()
d = "/tmp/gpu-models/llama-2-7b-real"
cfg = transformers.AutoConfig.from_pretrained(d)
with torch.device("cuda"):
    m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
m.save_pretrained(d + "-w", safe_serialization=True, max_shard_size="5GB")
for f in glob.glob(d + "-w/*.safetensors") + glob.glob(d + "-w/*.index.json"):
    os.replace(f, os.path.join(d, os.path.basename(f)))
del m; torch.cuda.empty_cache()
size = sum(os.path.getsize(f) for f in glob.glob(d + "/*.safetensors")) >> 20
print(f"wrote random weights in {time.time() - t:.1f} s: {size} MiB", flush=True)
PYEOF
}

start_gateway() {  # start_gateway PORT ID
  $PY -c "from gateway.cli import main; raise SystemExit(main())" --fleet "$FLEET" --redis-url $REDIS_URL \
    --port "$1" --gateway-id "$2" > $RUN/gateway-$2.log 2>&1 &
  echo $! > $RUN/gateway-$2.pid
}

wait_http() {  # wait_http URL SECONDS
  for _ in $(seq 1 $(( $2 * 2 ))); do
    $PY -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  say "$1 never answered"; return 1
}

bench() {  # the stack, then the load; BENCH_ARGS shorten it (dry)
  FLEET=$RUN/fleet-sleep.yaml
  say "gpu idle: $(smi)"
  $PY -c "from $WORKERS import main; raise SystemExit(main())" --fleet $FLEET --redis-url $REDIS_URL \
    --log-dir $RUN/logs --devices 1 --metrics-port ${METRICS_PORT:-9400} --ready-deadline 900 \
    --state-file $RUN/workers-state.json > $RUN/supervisor.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  start_gateway ${GW1:-9000} gw1; start_gateway ${GW2:-9001} gw2
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
  mkdir -p $VLLM $RUN/results && untar $VLLM .c2/*.tar.xz
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .whl2/*.whl || exit 1
  untar /tmp .whl2/redis7.tar.xz
  rm -rf $APP && mkdir -p $APP && cp -r "$SRC"/contract "$SRC"/gateway "$SRC"/workers "$SRC"/bench $APP/
  cp "$SRC"/bench/gpu/fleet-sleep.yaml $RUN/fleet-sleep.yaml
  mkdir -p $MODELS/llama-2-7b && cp "$SRC"/bench/gpu/configs/llama-2-7b/config.json .c2/tok/* $MODELS/llama-2-7b/
  (cd $APP && python3 -c "import vllm, redis, tenacity, orjson, fastapi, uvicorn, pydantic_settings, httpx; print('imports ok, vllm', vllm.__version__)") || exit 1
  write_real_weights || exit 1
  setsid bash $APP/bench/gpu/sleep.sh driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  R=/tmp/r7; LIBS=$R/lib
  if ! LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --version; then   # fall back to the system's C++ runtime
    mkdir -p $R/extra && mv $LIBS/libstdc++* $LIBS/libgcc_s* $R/extra/ 2>/dev/null
    LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --version || { say "redis-server does not run"; say "DRIVER DONE"; exit 1; }
  fi
  LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no \
    --maxclients 10000 > $RUN/redis.log 2>&1 &
  bench || say "BENCH FAILED"
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
  python3 - <<PYEOF
import glob, tarfile
with tarfile.open("$OUT/logs.tar.gz", "w:gz") as t:
    for f in glob.glob("$RUN/*.log") + glob.glob("$RUN/logs/*.log") + glob.glob("$RUN/results/*"):
        t.add(f, arcname=f.removeprefix("/tmp/"))
PYEOF
  ls -la "$OUT"
  ;;
stop)
  for f in $RUN/gateway-*.pid $RUN/supervisor.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
