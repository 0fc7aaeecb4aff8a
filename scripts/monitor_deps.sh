#!/usr/bin/env bash
# Install what the monitor's tests and the demo's dashboard screenshot need: a PostgreSQL server
# (the store's tests start their own throwaway cluster with it) and headless Chromium with its
# ChromeDriver (the dashboard's browser test, `make demo`'s PNG). Debian's packages; idempotent
# (scripts/apt_install.sh). Where it cannot install, the tests that need these skip and say why.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if ! bash "$here/apt_install.sh" "${missing[@]}"; then
  echo "monitor_deps: could not install ${missing[*]}; the tests that need them will skip" >&2
fi
