#!/usr/bin/env bash
# Builds one image with podman unless the image already there was built from the same inputs: the hash
# of the Containerfile, the input paths named and the base image's id is kept in the label llmgw.inputs,
# so a second `make images` takes seconds. Builds never pull: the Containerfile's first FROM (a tag or,
# as deploy/docker's, a digest-pinned reference) is replaced by BASE_IMAGE, a local stand-in (podman build
# --from). They use the host network (loopback and the package mirrors only). This machine's pip setup
# (config files, and the local wheel folders and indexes they name) is mounted read-only into the build,
# so pip inside finds what pip outside finds (the hashes of the requirements files are checked all the
# same); the Containerfiles themselves carry nothing of this machine. Builds hold the project's
# heavy-work lock (HEAVY_LOCK, /tmp/llmgw-heavy.lock).
#   usage: build-image.sh IMAGE[,EXTRA_TAG...] CONTAINERFILE CONTEXT BASE_IMAGE [INPUT_PATH...]
set -euo pipefail
tags=$1 containerfile=$2 context=$3 base=$4
shift 4
image=${tags%%,*}

input_hash() {
  { podman image inspect --format '{{.Id}}' "$base"; cat "$containerfile"; \
    find "$containerfile" "$@" -type f -not -path '*/__pycache__/*' -print0 2>/dev/null | sort -z | xargs -0 sha256sum; } \
    | sha256sum | cut -c1-16
}
current() {
  [ "$(podman image inspect --format '{{index .Labels "llmgw.inputs"}}' "$image" 2>/dev/null)" = "$inputs" ] \
    && echo "==> $image is current (inputs $inputs)"
}
inputs=$(input_hash "$@")
current && exit 0

mounts=()
for conf in /etc/pip.conf /etc/xdg/pip "$HOME/.config/pip"; do
  [ -e "$conf" ] && mounts+=(-v "$conf:${conf/#$HOME//root}:ro")
done
# Local folders that the pip setup names (find-links, file:// indexes, the constraints file).
while read -r path; do
  case $path in /etc/*) continue ;; esac  # config files and CA certificates: above and in the base
  [ -e "$path" ] && mounts+=(-v "$path:$path:ro")
done < <( { python3 -m pip config list 2>/dev/null; env | grep '^PIP_'; } \
  | grep -oE "(file://)?/[^' ]+" | sed 's#^file://##; s#/simple/*$##' | sort -u)

ignore=()
[ -f "$containerfile.dockerignore" ] && ignore=(--ignorefile "$containerfile.dockerignore")
tag_args=()
IFS=, read -ra all_tags <<<"$tags"
for tag in "${all_tags[@]}"; do tag_args+=(-t "$tag"); done

# Builds are heavy (2 cores shared): one at a time with the project's other heavy runs, the check above
# stays outside the lock so that a current image answers at once.
echo "==> building $image from $containerfile (inputs $inputs); waiting for ${HEAVY_LOCK:=/tmp/llmgw-heavy.lock}"
exec 9>"$HEAVY_LOCK"
flock 9
inputs=$(input_hash "$@")  # again under the lock: the files may have changed while it waited
current && exit 0
start=$SECONDS
podman build --pull=never --network host --from "$base" --layers "${ignore[@]}" "${mounts[@]}" \
  --label "llmgw.inputs=$inputs" "${tag_args[@]}" -f "$containerfile" "$context"
echo "==> $image built in $((SECONDS - start)) s"
