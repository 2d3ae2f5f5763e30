#!/usr/bin/env bash
# Build (or reuse) the Debian root filesystem kdra's image test runs in: what the Containerfile's base image
# is (Debian 12 "bookworm", minbase: debootstrap's variant that Debian's slim images are made from) plus
# `hack/image/install.sh runtime` run inside it, as the Containerfile runs it.
#
# Cached OUTSIDE the repository, as hack/k8s/build.sh caches its binaries: $KDRA_IMAGE_CACHE/rootfs-<stamp>
# (default ~/.cache/kdra/image), the stamp a hash of this script, install.sh and the suite. A cold build
# downloads ~60 MB of Debian packages (minutes); a warm run only prints the directory.
#
# Usage: hack/image/rootfs.sh     prints the root filesystem's directory as the last line of stdout.
# Needs root (debootstrap, chroot) and debootstrap (Debian package `debootstrap`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${KDRA_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdra/image}"
suite="${KDRA_IMAGE_SUITE:-bookworm}"
mirror="${KDRA_IMAGE_MIRROR:-http://deb.debian.org/debian}"

log() { printf '[hack/image/rootfs.sh] %s\n' "$*" >&2; }
die() { printf '[hack/image/rootfs.sh] ERROR: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "needs root (debootstrap and chroot)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
stamp="$(cat "$here/rootfs.sh" "$here/install.sh" <(echo "$suite") | sha256sum | cut -c1-16)"
out="$cache_root/rootfs-$stamp"
if [[ -f "$out/.complete" ]]; then
    log "reusing $out"
    echo "$out"
    exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if [[ -f "$out/.complete" ]]; then echo "$out"; exit 0; fi

tmp="$cache_root/.tmp-$stamp-$$"
cleanup() {
    for m in proc dev; do umount "$tmp/$m" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
start=$SECONDS
log "debootstrap --variant=minbase $suite into $tmp"
debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >&2 || die "debootstrap failed"
cp /etc/resolv.conf "$tmp/etc/resolv.conf"
mount -t proc proc "$tmp/proc"
mount --bind /dev "$tmp/dev"
cp "$here/install.sh" "$tmp/tmp/install.sh"
chroot "$tmp" /bin/sh /tmp/install.sh runtime >&2 || die "install.sh runtime failed in the chroot"
rm -f "$tmp/tmp/install.sh"
umount "$tmp/proc" "$tmp/dev"
: > "$tmp/etc/resolv.conf"
rm -rf "$out"
mv "$tmp" "$out"
touch "$out/.complete"
log "built in $(( SECONDS - start ))s: $out ($(du -sh "$out" | cut -f1))"
echo "$out"
