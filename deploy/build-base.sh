#!/bin/sh
# Builds the base image of deploy/Dockerfile, debian:bookworm-slim, from a Debian mirror with
# mmdebstrap, for hosts that cannot pull from a registry (air-gapped trading hosts, build machines
# behind a proxy that only reaches a local mirror). The image's apt sources point at the same
# mirror, so the Dockerfile's `apt-get install` steps use it too.
#
#   deploy/build-base.sh                                    # deb.debian.org, tag debian:bookworm-slim
#   MIRROR=http://mirror.internal/debian SECURITY_MIRROR=http://mirror.internal/debian-security \
#       deploy/build-base.sh
#   MIRROR=file:///srv/debian deploy/build-base.sh          # a mirror on this host's disk
#   make image                                              # then builds on it, offline
#
# Settings (environment): MIRROR (default http://deb.debian.org/debian), SECURITY_MIRROR (default:
# MIRROR's host with /debian-security; "none" leaves security updates out), SUITE (bookworm),
# TAG (debian:bookworm-slim; DEBIAN_IMAGE=... for `make image` when you choose another),
# ENGINE (docker when `docker info` answers, else podman).
#
# Like the official slim image it is the minbase variant without manuals, documentation (the
# copyright files stay) and translations. Needs mmdebstrap (Debian package mmdebstrap) and runs as
# root, or as a user with working user namespaces (mmdebstrap's unshare mode).
set -eu

MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=${SUITE:-bookworm}
TAG=${TAG:-debian:$SUITE-slim}
if [ -z "${SECURITY_MIRROR:-}" ]; then
    SECURITY_MIRROR=$(printf '%s\n' "$MIRROR" | sed 's|/debian/*$|/debian-security|')
    [ "$SECURITY_MIRROR" != "$MIRROR" ] || SECURITY_MIRROR=none
fi
if [ -z "${ENGINE:-}" ]; then
    if docker info >/dev/null 2>&1; then ENGINE=docker
    elif podman info >/dev/null 2>&1; then ENGINE=podman
    else echo "build-base: neither 'docker info' nor 'podman info' answers" >&2; exit 1
    fi
fi
command -v mmdebstrap >/dev/null 2>&1 || {
    echo "build-base: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 1; }

sources="deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main"
[ "$SECURITY_MIRROR" = none ] || sources="$sources
deb $SECURITY_MIRROR $SUITE-security main"

tar=$(mktemp --suffix=.tar)
trap 'rm -f "$tar"' EXIT INT TERM
echo "build-base: $SUITE from $MIRROR${SECURITY_MIRROR:+ (security: $SECURITY_MIRROR)} -> $TAG ($ENGINE)"
# The path excludes are dpkg's own configuration inside the image: packages installed later
# (the Dockerfile's) are slimmed the same way.
printf '%s\n' "$sources" | mmdebstrap --quiet --variant=minbase --mode=auto \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log "$1"/var/log/apt/*' \
    "$SUITE" "$tar" -
"$ENGINE" import --change 'CMD ["bash"]' "$tar" "$TAG" >/dev/null
"$ENGINE" run --rm --network host "$TAG" true
size=$("$ENGINE" image inspect --format '{{.Size}}' "$TAG")
echo "build-base: $TAG ready ($((size / 1000000)) MB); make image builds on it"
