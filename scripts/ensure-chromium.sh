#!/usr/bin/env bash
# Ensures a Chromium binary for the real-browser tests in dashboard/
# (browser_test.go). Installs Debian's chromium package when running as
# root with apt-get and QUEEN_NO_INSTALL unset; otherwise prints the
# command that would install it and exits 1. `make test` calls this
# best-effort: the browser tests skip with a message when no binary is
# found, so a machine without Chromium still runs the rest of the suite.
#
# The search order matches dashboard/browser_test.go: $QUEEN_CHROMIUM,
# then chromium, chromium-browser, google-chrome on PATH.
set -euo pipefail

INSTALL_CMD="apt-get install -y chromium"

have_chromium() {
  local b
  if [[ -n "${QUEEN_CHROMIUM:-}" && -x "${QUEEN_CHROMIUM}" ]]; then
    echo "$QUEEN_CHROMIUM"; return 0
  fi
  for b in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$b" >/dev/null 2>&1; then
      command -v "$b"; return 0
    fi
  done
  return 1
}

if bin=$(have_chromium); then
  echo "ensure-chromium: Chromium at $bin"
  exit 0
fi

if [[ $(id -u) -eq 0 && -z "${QUEEN_NO_INSTALL:-}" ]] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: installing Debian's chromium (set QUEEN_NO_INSTALL=1 to skip)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
  if bin=$(have_chromium); then
    echo "ensure-chromium: Chromium at $bin"
    exit 0
  fi
  echo "ensure-chromium: installation finished but no chromium binary found" >&2
  exit 1
fi

echo "ensure-chromium: no Chromium binary found (the browser tests will skip)." >&2
echo "ensure-chromium: install it with: $INSTALL_CMD" >&2
exit 1
