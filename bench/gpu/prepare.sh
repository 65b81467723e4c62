#!/usr/bin/env bash
# Build .whl2/ (git-ignored) HERE, for the H200 run: the project's Python dependencies that the device
# image lacks (cp312 wheels) and a Redis server (>= 6: redis-py speaks RESP3) with its shared libraries.
# vLLM itself comes from ../shared/gpu/build_carry.sh (.c1/, .c2/). See bench/gpu/device.sh.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qxF '/.whl2/' .git/info/exclude 2>/dev/null || echo '/.whl2/' >> .git/info/exclude
mkdir -p .whl2
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp"
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do PLAT="$PLAT --platform $p"; done
# The image has httpx, uvloop, pyyaml, prometheus-client; .c2's deps312 has fastapi, starlette, uvicorn,
# httptools, pydantic, pydantic-settings. Missing: these three.
python3 -m pip download -q --no-deps $PLAT -d .whl2 redis==8.1.0 tenacity==9.2.1 orjson==3.13.0
# Redis 7 from this machine's distribution (needs glibc >= 2.36 there), libraries beside it.
SRV=$(readlink -f "$(command -v redis-server)")
W=$(mktemp -d); mkdir -p "$W/r7/bin" "$W/r7/lib"
cp "$SRV" "$W/r7/bin/redis-server"
for l in $(ldd "$SRV" | awk '/=>/{print $3}'); do
  case $(basename "$l") in libc.so.6|libm.so.6) ;; *) cp -L "$l" "$W/r7/lib/" ;; esac
done
tar -C "$W" -cf - r7 | xz -9 -T0 > .whl2/redis7.tar.xz
rm -rf "$W"
du -sh .whl2
