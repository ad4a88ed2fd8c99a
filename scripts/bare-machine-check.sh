#!/usr/bin/env bash
# Checks the README's two commands on a bare Debian 12 (or Ubuntu 24.04) root: builds a minimal
# root with debootstrap, clones this repository's committed HEAD into it, and runs
# `scripts/run.sh` then `scripts/test.sh` there as root, timing each. Nothing else is installed
# into the root beforehand: setup.sh has to find and install everything itself (the CUDA toolkit
# from the distribution's non-free / multiverse component included).
#
#   scripts/bare-machine-check.sh [debian12|ubuntu24.04] [ROOT_DIR]
#
# Needs root, debootstrap and network access to the distribution's mirror; not part of CI (it
# downloads about 3 GB and takes 30+ minutes on 2 cores). Logs and timings go to ROOT_DIR.log/.
# Set KEEP_ROOT=1 to reuse an existing root (only the clone and the two commands are redone).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DIST=${1:-debian12}
ROOT=${2:-/var/tmp/coldstart-bare-$DIST}
LOGS="$ROOT.log"
case "$DIST" in
  debian12)    SUITE=bookworm; MIRROR=http://deb.debian.org/debian; EXTRA=() ;;
  ubuntu24.04) SUITE=noble;    MIRROR=http://archive.ubuntu.com/ubuntu
               EXTRA=(--keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg) ;;
  *) echo "bare-machine-check: unknown distribution '$DIST' (debian12 | ubuntu24.04)" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then echo "bare-machine-check: needs root (debootstrap, chroot)" >&2; exit 2; fi
command -v debootstrap >/dev/null || { echo "bare-machine-check: install debootstrap first" >&2; exit 2; }

mkdir -p "$LOGS"
if [ "${KEEP_ROOT:-0}" != 1 ] || [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  rm -rf "$ROOT"
  echo "bare-machine-check: debootstrap $SUITE (minbase) into $ROOT"
  debootstrap --variant=minbase "${EXTRA[@]}" "$SUITE" "$ROOT" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1
fi

mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev dev/pts; do
  mkdir -p "$ROOT/$m"
  mount --bind "/$m" "$ROOT/$m"
  mounted+=("$ROOT/$m")
done
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"

# The committed HEAD, as a clean clone would have it.
rm -rf "$ROOT/root/coldstart"
git clone -q --no-local "$REPO" "$ROOT/root/coldstart"
echo "bare-machine-check: cloned $(git -C "$REPO" rev-parse --short=12 HEAD)"

run_in_root() {  # name, command
  local name=$1 cmd=$2 start end rc
  start=$(date +%s)
  set +e
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 /bin/bash -c "cd /root/coldstart && $cmd" >"$LOGS/$name.log" 2>&1
  rc=$?
  set -e
  end=$(date +%s)
  echo "bare-machine-check: $name: exit $rc after $((end - start)) s (log: $LOGS/$name.log)" | tee -a "$LOGS/summary.txt"
  return $rc
}
: >"$LOGS/summary.txt"
rc=0
run_in_root run scripts/run.sh || rc=1
run_in_root test scripts/test.sh || rc=1
tail -n 25 "$LOGS/run.log" | sed 's/^/  run | /'
tail -n 8 "$LOGS/test.log" | sed 's/^/  test | /'
exit $rc
