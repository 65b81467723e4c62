#!/usr/bin/env bash
# The stand-in for python:3.11-slim (no image can be pulled here): Debian bookworm's minimal base with
# Python 3.11 and pip, made with debootstrap from the Debian mirror of this machine's apt sources, then
# `podman import`ed as localhost/llmgw-standin-python:3.11-slim. Differences from the upstream image that
# matter to our builds are closed here: `python` and `pip` on PATH (python-is-python3), pip may install
# system-wide (Debian's EXTERNALLY-MANAGED marker removed: python:3.11-slim has none), apt inside the
# image uses the same mirror, and the host's CA certificates are copied in (pip and apt trust the same
# roots the host does). About 5 minutes on the first run; the tarball is cached under .cache/standin.
#   usage: standin-base.sh IMAGE_NAME CACHE_DIR
set -euo pipefail
image=$1 cache=$2
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}
tarball=$cache/python-3.11-slim.tar

if podman image exists "$image"; then
  echo "==> $image is there"
  exit 0
fi
mkdir -p "$cache"
exec 9>"${HEAVY_LOCK:-/tmp/llmgw-heavy.lock}"  # heavy work: one at a time with the project's other heavy runs
flock 9
if [ ! -s "$tarball" ]; then
  rootfs=$cache/rootfs
  rm -rf "$rootfs"
  echo "==> debootstrap bookworm from $mirror (about 5 minutes; log: $cache/debootstrap.log)"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log"; exit 1; }
  cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SOURCES
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$rootfs"
fi
echo "==> podman import $image"
podman import --change 'ENV LANG=C.UTF-8' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' --message "stand-in for python:3.11-slim (debootstrap bookworm)" "$tarball" "$image" >/dev/null
