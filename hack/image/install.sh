#!/bin/sh
# The steps that make kdra's image, shared by the Containerfile and the image test (tests/e2e/test_image.py,
# which runs them with chroot in a Debian root filesystem made by hack/image/rootfs.sh), so both build the
# same thing.
#
#   install.sh runtime      Debian's python3 (no compilers, no -dev packages), CA certificates, user kdra
#                           (uid/gid 65532); apt lists and caches removed.
#   install.sh venv DIR     kdra from the wheels in DIR (its own wheel and its dependencies', no index) into
#                           the virtual environment /opt/kdra, byte-compiled (a read-only root filesystem
#                           then needs no write), pip removed from it.
set -eu
case "${1:-}" in
runtime)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*
    getent group kdra >/dev/null || groupadd --system --gid 65532 kdra
    getent passwd kdra >/dev/null || useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent \
        --no-create-home --shell /usr/sbin/nologin kdra
    ;;
venv)
    wheels="${2:?usage: install.sh venv WHEEL_DIR}"
    python3 -m venv /opt/kdra
    /opt/kdra/bin/pip install -q --no-index --no-cache-dir --find-links "$wheels" kdra
    /opt/kdra/bin/pip uninstall -q -y pip
    python3 -m compileall -q /opt/kdra/lib
    ;;
*)
    echo "usage: install.sh runtime | venv WHEEL_DIR" >&2
    exit 2
    ;;
esac
