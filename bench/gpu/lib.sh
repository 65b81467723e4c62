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
