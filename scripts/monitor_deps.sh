#!/usr/bin/env bash
# Install what the monitor's tests and the demo's dashboard screenshot need: a PostgreSQL server
# (the store's tests start their own throwaway cluster with it) and headless Chromium with its
# ChromeDriver (the dashboard's browser test, `make demo`'s PNG). Debian's packages; idempotent:
# a no-op when everything is present, apt-get update runs only when something is missing.
# Needs root (or sudo). Where it cannot install, the tests that need these skip and say why.
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "monitor_deps: no apt-get; install ${missing[*]} yourself (their tests skip until then)" >&2
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "monitor_deps: installing ${missing[*]}" >&2
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        --no-install-recommends "${missing[@]}"; } >&2; then
  echo "monitor_deps: could not install ${missing[*]}; the tests that need them will skip" >&2
fi
