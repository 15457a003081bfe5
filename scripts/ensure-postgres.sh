#!/usr/bin/env bash
# Ensures the PostgreSQL server binaries (initdb, postgres) that
# internal/pgtemp needs are installed. Installs them when running as root
# with apt-get and QUEEN_NO_INSTALL unset; otherwise prints the command
# that would install them and exits 1.
#
# The search order matches internal/pgtemp: pg_config --bindir, the
# highest /usr/lib/postgresql/*/bin, then PATH.
set -euo pipefail

INSTALL_CMD="apt-get install -y postgresql-15"

have_server() {
  local dir
  if command -v pg_config >/dev/null 2>&1; then
    dir=$(pg_config --bindir 2>/dev/null || true)
    if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/postgres" ]]; then
      echo "$dir"; return 0
    fi
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -rn); do
    if [[ -x "$dir/initdb" && -x "$dir/postgres" ]]; then
      echo "$dir"; return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    dirname "$(command -v postgres)"; return 0
  fi
  return 1
}

if dir=$(have_server); then
  echo "ensure-postgres: PostgreSQL server binaries in $dir"
  exit 0
fi

if [[ $(id -u) -eq 0 && -z "${QUEEN_NO_INSTALL:-}" ]] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-postgres: installing PostgreSQL server (set QUEEN_NO_INSTALL=1 to skip)" >&2
  # Note: the Debian package also creates a system cluster; pgtemp never
  # uses it. Fall back to the distribution's default version if 15 is absent.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql-15 >/dev/null ||
    apt-get install -y -qq postgresql >/dev/null
  if dir=$(have_server); then
    echo "ensure-postgres: PostgreSQL server binaries in $dir"
    exit 0
  fi
  echo "ensure-postgres: installation finished but initdb/postgres still not found" >&2
  exit 1
fi

echo "ensure-postgres: PostgreSQL server binaries (initdb, postgres) not found." >&2
echo "ensure-postgres: install them with: $INSTALL_CMD" >&2
exit 1
