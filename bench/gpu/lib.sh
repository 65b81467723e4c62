# What the GPU drivers (device.sh, fullload.sh, sleep.sh) share; sourced by them, not run.
# shellcheck shell=bash

say() { echo "[device $(date +%H:%M:%S)] $*"; }
smi() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits; }

untar() {  # untar DIR FILE... : Python's tarfile, no pip needed
  ${PY:-python3} - "$@" <<'PYEOF'
import sys, tarfile, time
dest = sys.argv[1]
for f in sys.argv[2:]:
    t = time.time()
    with tarfile.open(f) as tf:
        tf.extractall(dest, filter="fully_trusted")
    print(f"unpacked {f} in {time.time() - t:.1f} s", flush=True)
PYEOF
}

stop_pidfile() {  # SIGTERM the process in a pid file, wait for it (the supervisor drains and stops vLLM)
  local pid; pid=$(cat "$1" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 90); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL "$pid" 2>/dev/null; rm -f "$1"
}

follow_driver() {  # follow_driver LOG SECONDS [DONE_PATTERN]: print the driver log's new lines until
  # DONE_PATTERN (default "DRIVER DONE") appears or SECONDS pass; LOG.seen keeps the place between calls.
  local log=$1 end=$(( $(date +%s) + $2 )) done=${3:-DRIVER DONE} seen lines
  seen=$(cat "$log.seen" 2>/dev/null || echo 0)
  while [ "$(date +%s)" -lt "$end" ]; do
    lines=$(wc -l < "$log")
    [ "$lines" -gt "$seen" ] && sed -n "$((seen + 1)),${lines}p" "$log" && seen=$lines
    grep -q "$done" "$log" && break
    sleep 3
  done
  sed -n "$((seen + 1)),\$p" "$log"; wc -l < "$log" > "$log.seen"
}

carry_root() {  # carry_root SRC: the folder that holds the carried .c1/ .c2/ .whl2/ ($CARRY, else the
  # current directory, else the tree the script is in or its parent): a recipe runs from any directory
  local d
  for d in "${CARRY:-}" "$PWD" "$1" "$1/.."; do
    [ -n "$d" ] && { [ -d "$d/.c1" ] || [ -d "$d/.c2" ] || [ -d "$d/.whl2" ]; } && { (cd "$d" && pwd); return 0; }
  done
  pwd
}

fresh_run() {  # fresh_run: stop what an earlier run of this recipe left ($RUN/*.pid: Redis, gateways,
  # supervisor), then empty $RUN, so a recipe never reads another run's log position or finds its port taken
  local f
  for f in "$RUN"/*.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  rm -rf "$RUN" && mkdir -p "$RUN/results" "$RUN/logs"
}

start_redis() {  # start_redis PORT: the carried Redis 7 (/tmp/r7), pid in $RUN/redis.pid; 1 if it cannot run
  local R=/tmp/r7 LIBS=/tmp/r7/lib
  if ! LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --version; then   # fall back to the system's C++ runtime
    mkdir -p $R/extra && mv $LIBS/libstdc++* $LIBS/libgcc_s* $R/extra/ 2>/dev/null
    LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --version || { say "redis-server does not run"; return 1; }
  fi
  LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
    --maxclients 10000 > "$RUN/redis.log" 2>&1 &
  echo $! > "$RUN/redis.pid"
}

run_gateway() {  # run_gateway PORT ID: one gateway of $FLEET on $REDIS_URL, its log and pid in $RUN
  $PY -c "from gateway.cli import main; raise SystemExit(main())" --fleet "$FLEET" --redis-url $REDIS_URL \
    --port "$1" --gateway-id "$2" > $RUN/gateway-$2.log 2>&1 &
  echo $! > $RUN/gateway-$2.pid
}

wait_http() {  # wait_http URL SECONDS: until the URL answers (1 when it never does)
  for _ in $(seq 1 $(( $2 * 2 ))); do
    $PY -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  say "$1 never answered"; return 1
}

write_real_weights() {  # (sleep.sh; fullload.sh with SLEEP_LEVEL=2) random bf16 safetensors of the Llama-2-7B shape (level 2 reloads from disk)
  mkdir -p $MODELS/llama-2-7b-real && cp $MODELS/llama-2-7b/* $MODELS/llama-2-7b-real/
  ${PY:-python3} - <<'PYEOF'
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

recipe() {  # recipe NAME REDIS_PORT: the driver's tree (SRC), its own code copy, run folder and Redis port
  # (APP, RUN, REDIS_PORT overridable), the shared vLLM and models, and the GPU environment
  SRC=$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)
  APP=${APP:-/tmp/app-$1} RUN=${RUN:-/tmp/run-$1} VLLM=/tmp/vllm SITE=/tmp/site MODELS=/tmp/gpu-models
  REDIS_PORT=${REDIS_PORT:-$2}
  REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
  gpu_env
}

gpu_env() {  # the environment of every GPU driver (APP, SITE, VLLM set by the driver)
  export PYTHONPATH=$APP:$SITE:$VLLM PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}

unpack_c1() {  # phase unpack1: vLLM's first half (.c1), and what the machine is
  mkdir -p $VLLM && untar $VLLM .c1/*.tar.xz
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 -V
}

install_run() {  # phase start: a fresh $RUN, vLLM's second half (.c2), the wheels (.whl2) and Redis 7,
  # and the code of this run fixed under $APP (from $SRC, the tree the driver is in)
  fresh_run
  mkdir -p $VLLM && untar $VLLM .c2/*.tar.xz
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .whl2/*.whl || return 1
  untar /tmp .whl2/redis7.tar.xz
  rm -rf $APP && mkdir -p $APP && cp -r "$SRC"/llmgw_contract "$SRC"/gateway "$SRC"/workers "$SRC"/bench $APP/
}

lay_out_model() {  # lay_out_model NAME: its config (bench/gpu/configs) and the carried tokenizer
  mkdir -p $MODELS/$1 && cp "$SRC"/bench/gpu/configs/$1/config.json .c2/tok/* $MODELS/$1/
}

check_imports() {  # check_imports [MODULE...]: the run's Python imports what the drivers need
  (cd $APP && python3 -c "import vllm, redis, orjson, fastapi, uvicorn, pydantic_settings, httpx${1:+, $1}; print('imports ok, vllm', vllm.__version__)")
}

pack_logs() {  # pack_logs TAR GLOB...: the files the globs match, named from /tmp on
  local tar=$1; shift
  python3 - "$tar" "$@" <<'PYEOF'
import glob, sys, tarfile
with tarfile.open(sys.argv[1], "w:gz") as t:
    for pattern in sys.argv[2:]:
        for f in glob.glob(pattern):
            t.add(f, arcname=f.removeprefix("/tmp/"))
PYEOF
}
