#!/usr/bin/env bash
# Ensures the parts of the high-availability tests are installed: Patroni
# (3.0), etcd (3.4) and PgBouncer (1.18), from Debian's packages. The tests
# run their own etcd, Patroni and PgBouncer processes on loopback in
# temporary directories; the packages' system services are never started
# (a policy-rc.d denies it during the install) and never used.
#
# Installs when running as root with apt-get and QUEEN_NO_INSTALL unset;
# otherwise prints the command that would install them and exits 1.
#
# `ensure-ha.sh pgbouncer` ensures PgBouncer only (make test needs no more).
set -euo pipefail

PKGS=(patroni python3-etcd etcd-server etcd-client pgbouncer)
only_pgbouncer=0
if [[ ${1:-} == pgbouncer ]]; then
  PKGS=(pgbouncer)
  only_pgbouncer=1
fi

missing=()
if [[ $only_pgbouncer -eq 0 ]]; then
  command -v patroni >/dev/null 2>&1 || missing+=(patroni)
  # Patroni's etcd and etcd3 stores both import python-etcd, which the
  # patroni package may leave out (it is one of several alternatives).
  /usr/bin/python3 -c 'import etcd' >/dev/null 2>&1 || missing+=(python3-etcd)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
fi
command -v pgbouncer >/dev/null 2>&1 || [[ -x /usr/sbin/pgbouncer ]] || missing+=(pgbouncer)

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "ensure-ha: ${PKGS[*]} present"
  exit 0
fi

if [[ $(id -u) -ne 0 || -n "${QUEEN_NO_INSTALL:-}" ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-ha: missing ${missing[*]}; install with: apt-get install -y ${PKGS[*]}" >&2
  exit 1
fi

echo "ensure-ha: installing ${missing[*]} (set QUEEN_NO_INSTALL=1 to skip)" >&2
# Keep the packages' own services from starting: the tests run their own.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  own_policy=1
fi
cleanup() { [[ $own_policy -eq 1 ]] && rm -f "$policy"; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/ensure-ha-apt.log 2>&1; then
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/ensure-ha-apt.log 2>&1 || {
    echo "ensure-ha: apt-get install failed; see /tmp/ensure-ha-apt.log" >&2
    exit 1
  }
fi
# Services a package started anyway (no policy-rc.d honoured) are stopped.
for svc in etcd pgbouncer patroni; do
  if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" >/dev/null 2>&1 || true; fi
done
echo "ensure-ha: installed ${missing[*]}"
