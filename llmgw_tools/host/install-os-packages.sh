#!/usr/bin/env bash
# Installs the OS packages the project needs and respects the host while doing so (the Makefile's only
# way to apt-get; tests/llmgw_tools/test_makefile_host.py checks that).
#
#   llmgw_tools/host/install-os-packages.sh --why TEXT [--log FILE] [--record FILE] [--services "NAME ..."] PKG...
#
# - Only packages dpkg does not already list as installed are installed; when there are none, nothing runs.
# - Before anything runs it says what it installs and why, and whether through sudo.
# - As root (CI, a fresh machine) apt-get runs directly; as another user through `sudo` (which may ask for
#   the password); without sudo it prints the command to run as root and fails.
# - The packages it installed are appended to the --record file (.cache/os-packages-installed).
# - --services names the services that Debian's postinst starts when their package (of the same name) is
#   installed: the stack runs its own redis-server, nginx and Prometheus processes on ports and files of its
#   own, so a service this script has just installed is stopped and disabled again. A service whose package
#   was already installed is never touched: it is the host's. (Preventing the start with a policy-rc.d
#   would mean writing a host-wide file during the install; stopping what we just started touches only
#   what we brought.)
# LLMGW_SYSTEMD_RUN: systemd's runtime folder, which says whether systemd runs here (a test points it away).
set -euo pipefail

why="" log="" record="" services=""
while [ $# -gt 0 ]; do
  case "$1" in
    --why) why="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --record) record="$2"; shift 2 ;;
    --services) services="$2"; shift 2 ;;
    --) shift; break ;;
    -*) echo "install-os-packages.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done

missing=()
for pkg in "$@"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
  how="as root"
elif command -v sudo >/dev/null; then
  sudo=(sudo)
  how="with sudo (it may ask for your password)"
else
  echo "==> missing OS packages: ${missing[*]} (${why})" >&2
  echo "==> sudo is not available: as root, run" >&2
  echo "      apt-get update && apt-get install --no-install-recommends ${missing[*]}" >&2
  echo "    then run make again" >&2
  exit 1
fi
echo "==> ${why}"
echo "==> installing OS packages ${how}: ${missing[*]}"

apt() {
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@"
}
if [ -n "$log" ]; then
  { apt update -qq && apt install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 \
    || { tail -20 "$log" >&2; exit 1; }
else
  apt update -qq && apt install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -n "$record" ] && printf '%s\n' "${missing[@]}" >>"$record"

for svc in $services; do
  installed_now=0
  for pkg in "${missing[@]}"; do [ "$pkg" = "$svc" ] && installed_now=1; done
  [ "$installed_now" -eq 1 ] || continue
  echo "==> stopping and disabling the ${svc} service Debian started on install (the stack runs its own)"
  if [ -d "${LLMGW_SYSTEMD_RUN:-/run/systemd/system}" ]; then
    "${sudo[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$svc" ]; then
    "${sudo[@]}" service "$svc" stop >/dev/null 2>&1 || true
  fi
done
