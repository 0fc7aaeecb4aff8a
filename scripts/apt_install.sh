#!/usr/bin/env bash
# Install Debian packages that are missing, one apt at a time across the project's scripts: the set-up
# steps run side by side (scripts/setup.sh), and several of them install packages (the sandbox's tools,
# PostgreSQL and Chromium, docker.io, debootstrap, etcd). A lock under the cache serialises them, dpkg's
# own lock is waited for rather than failed on (something outside the project may hold it), and the
# package lists are refreshed at most once an hour. Idempotent: a no-op when every package is installed.
#
# Usage: scripts/apt_install.sh PACKAGE...      (root, or password-less sudo)
# Exit 3 with a one-line reason when this machine has no apt-get or no way to become root.
set -euo pipefail
[ $# -gt 0 ] || exit 0
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
command -v apt-get >/dev/null 2>&1 || { echo "apt_install: no apt-get to install ${missing[*]}" >&2; exit 3; }
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo -n true 2>/dev/null || { echo "apt_install: not root and no password-less sudo for ${missing[*]}" >&2; exit 3; }
  sudo="sudo"
fi
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}"
mkdir -p "$cache"
exec 7>"$cache/.apt.lock"
flock 7
apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=900)
fresh="$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages' -newermt '-60 minutes' 2>/dev/null | head -n 1)"
[ -n "$fresh" ] || "${apt[@]}" update >&2
echo "apt_install: installing ${missing[*]}" >&2
"${apt[@]}" install -y --no-install-recommends "${missing[@]}" >&2
