#!/usr/bin/env bash
# Install the system tools the sandbox needs (bubblewrap jail, libseccomp for its system-call
# filter, git/patch for SWE tasks, gcc/g++ for C/C++ code tasks, prlimit). Idempotent: a no-op when
# everything is present (scripts/apt_install.sh). Needs root (or sudo) on Debian/Ubuntu.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
declare -A need=( [bwrap]=bubblewrap [git]=git [patch]=patch [gcc]=gcc [g++]=g++ [prlimit]=util-linux [setpriv]=util-linux )
missing=()
for tool in "${!need[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${need[$tool]}")
done
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 ' || missing+=(libseccomp2)
[ ${#missing[@]} -eq 0 ] && exit 0
bash "$here/apt_install.sh" $(printf '%s\n' "${missing[@]}" | sort -u)
