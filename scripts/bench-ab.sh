#!/usr/bin/env bash
# bench-ab.sh: A/B pairs of two queen-node binaries on one running PostgreSQL,
# alternated (A B A B ...), each run on a fresh database with the same
# queen-bench workload, then `queen-bench compare` of each pair.
#
#   scripts/bench-ab.sh A/queen-node B/queen-node OUTDIR PAIRS NODES -- queen-bench flags...
#
# PG_URL (required) is a server URL whose database part is replaced per run
# (start one with the production settings of internal/suite/pgserver.go, ProductionSettings, e.g. `go run ./cmd/pgtemp -port 55432 -set fsync=on ... -- sleep infinity`).
# NODES is the node count of each run (1..5); nodes listen on 127.0.0.1.
# QUEEN_BENCH (default bin/queen-bench) is the load generator.
# QUEEN_MESH_SECRET (default: a random key per invocation) seals the nodes' mesh.
# PRODUCER_NODES=N puts the producers on the first N nodes only (consumers on all).
# CONSUMER_FROM=K puts the consumers on nodes K.. only (with PRODUCER_NODES: cross-node wake).
# DB_OPTS_B="..." adds CREATE DATABASE options to B's runs only (e.g. a collation:
# "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.utf8'"), for an A/B of the database with one binary.
# PROFILE_SECONDS=S saves a CPU profile of every node (OUT/LABEL.nodeN.pprof), S seconds from
# 3 s after the load starts (QUEEN_PPROF_ADDR on 127.0.0.1:16800+N).
set -euo pipefail
if [ $# -lt 6 ] || [ "$6" != "--" ]; then
	echo "usage: $0 A/queen-node B/queen-node OUTDIR PAIRS NODES -- queen-bench flags..." >&2
	exit 2
fi
A=$1 B=$2 OUT=$3 PAIRS=$4 NODES=$5
shift 6
: "${PG_URL:?set PG_URL to the server URL}"
BENCH=${QUEEN_BENCH:-bin/queen-bench}
# A sealed mesh, as in production (push ownership needs one: docs/api.md);
# QUEEN_MESH_SECRET="" runs an open one.
SECRET=${QUEEN_MESH_SECRET-$(head -c 32 /dev/urandom | base64)}
PSQL=${PSQL:-/usr/lib/postgresql/15/bin/psql}
mkdir -p "$OUT"
base=${PG_URL%%\?*}
base=${base%/*}
query=""
[[ $PG_URL == *\?* ]] && query="?${PG_URL#*\?}"

pids=()
stop_nodes() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop_nodes EXIT

run_one() { # bin label
	local bin=$1 label=$2 db="ab_$(date +%s%N)"
	shift 2
	local opts=""
	[[ $label == b* ]] && opts=${DB_OPTS_B:-}
	"$PSQL" -q "$PG_URL" -c "CREATE DATABASE $db $opts" >/dev/null
	local url="$base/$db$query" urls="" join="" i n u
	for i in $(seq 1 "$NODES"); do
		local hp=$((16700 + i * 2)) mp=$((16701 + i * 2)) pp=""
		[ -n "${PROFILE_SECONDS:-}" ] && pp=127.0.0.1:$((16800 + i))
		QUEEN_PPROF_ADDR=$pp QUEEN_PG_URL=$url QUEEN_HTTP_ADDR=127.0.0.1:$hp QUEEN_MESH_BIND=127.0.0.1:$mp \
			QUEEN_NODE_NAME=ab$i QUEEN_MESH_JOIN=$join QUEEN_LOG_LEVEL=warn QUEEN_MESH_SECRET=$SECRET \
			"$bin" >"$OUT/$label.node$i.log" 2>&1 &
		pids+=($!)
		join=127.0.0.1:$((16701 + 2))
		urls="$urls${urls:+,}http://127.0.0.1:$hp"
		for _ in $(seq 1 100); do
			curl -fs "http://127.0.0.1:$hp/health" >/dev/null 2>&1 && break
			sleep 0.1
		done
	done
	# the mesh formed: every node sees NODES alive members
	for u in ${urls//,/ }; do
		for _ in $(seq 1 100); do
			n=$(curl -fs "$u/status" | grep -o '"state":"alive"' | wc -l || true)
			[ "$n" -ge "$NODES" ] && break
			sleep 0.1
		done
	done
	local pn=$urls cn=()
	if [ -n "${PRODUCER_NODES:-}" ]; then # producers on the first N nodes only, consumers on all
		pn=$(echo "$urls" | cut -d, -f1-"$PRODUCER_NODES")
		cn=(--consumer-nodes "$urls")
	fi
	if [ -n "${CONSUMER_FROM:-}" ]; then # consumers on nodes CONSUMER_FROM.. only (cross-node wake)
		cn=(--consumer-nodes "$(echo "$urls" | cut -d, -f"$CONSUMER_FROM"-)")
	fi
	local profs=()
	if [ -n "${PROFILE_SECONDS:-}" ]; then
		for i in $(seq 1 "$NODES"); do
			(sleep 3 && curl -fs "http://127.0.0.1:$((16800 + i))/debug/pprof/profile?seconds=$PROFILE_SECONDS" \
				-o "$OUT/$label.node$i.pprof") &
			profs+=($!)
		done
	fi
	"$BENCH" --nodes "$pn" "${cn[@]}" --pg-url "$url" --json "$OUT/$label.json" "$@" >"$OUT/$label.txt" 2>&1 || echo "run $label failed (exit $?)" >&2
	for p in "${profs[@]}"; do wait "$p" || echo "profile of $label failed" >&2; done
	n=0
	for u in ${urls//,/ }; do
		n=$((n + 1))
		curl -fs "$u/metrics" >"$OUT/$label.node$n.metrics" 2>/dev/null || true
	done
	stop_nodes
	"$PSQL" -q "$PG_URL" -c "DROP DATABASE $db" >/dev/null || true
	grep -E 'delivered \(first|send -> delivered|postgresql|node http' "$OUT/$label.txt" | sed "s/^/$label: /" || true
}

for i in $(seq 1 "$PAIRS"); do
	run_one "$A" "a$i" "$@"
	run_one "$B" "b$i" "$@"
	"$BENCH" compare "$OUT/a$i.json" "$OUT/b$i.json" >"$OUT/compare$i.txt" 2>&1 || true
done
echo "pairs in $OUT (compareN.txt)"
