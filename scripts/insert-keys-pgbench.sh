#!/usr/bin/env bash
# insert-keys-pgbench.sh PG_URL: what the message table's keys cost an insert,
# with pgbench (docs/benchmarks.md, "tenth session"). Tables shaped as
# queen.messages in a scratch schema "queen_insert_keys" of PG_URL's database
# (the script refuses to start if it exists, and drops it at the end), not
# autovacuumed; 100 rows per statement, one per partition of 100; 4 clients,
# 15 s per case, the cases interleaved, three rounds. Prints the CPU of every server
# process (backends, WAL writer, checkpointer...) per row; run it with the
# server on this host and nothing else using it.
#
# Cases: uuid = uuid partition key, random (UUIDv4) transaction ids;
# bigint = bigint partition key, the same; seq = uuid key, ids shaped as the
# load generator's "<producer>-<seq>" (unpadded); padded = uuid key,
# zero-padded increasing ids. The random ids come from gen_random_uuid()
# calls in the statement, which cost the uuid and bigint cases about 5 us per
# row more than the others.
set -euo pipefail
U=${1:?usage: insert-keys-pgbench.sh PG_URL}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PSQL="$PGBIN/psql"; PGBENCH="$PGBIN/pgbench"
[ -x "$PSQL" ] || PSQL=psql
[ -x "$PGBENCH" ] || PGBENCH=pgbench
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$PSQL" -q -v ON_ERROR_STOP=1 "$U" -c "CREATE SCHEMA queen_insert_keys" 2>/dev/null && true ||
  { echo "insert-keys-pgbench: cannot create schema queen_insert_keys (it exists?)" >&2; exit 1; }
trap 'rm -rf "$dir"; "$PSQL" -q "$U" -c "DROP SCHEMA IF EXISTS queen_insert_keys CASCADE" >/dev/null 2>&1 || true' EXIT
"$PSQL" -q -v ON_ERROR_STOP=1 "$U" <<'SQL'
SET client_min_messages = warning;
CREATE TABLE queen_insert_keys.pa (id uuid PRIMARY KEY, num bigint GENERATED ALWAYS AS IDENTITY UNIQUE);
INSERT INTO queen_insert_keys.pa (id) SELECT gen_random_uuid() FROM generate_series(1, 100);
CREATE SEQUENCE queen_insert_keys.s;
CREATE TABLE queen_insert_keys.pl (p text); INSERT INTO queen_insert_keys.pl SELECT repeat('x', 256);
CREATE TABLE queen_insert_keys.m_uuid (partition_id uuid NOT NULL, off bigint NOT NULL, id uuid NOT NULL, transaction_id text NOT NULL,
  trace_id uuid, payload json, producer_sub text, created_at timestamptz NOT NULL, PRIMARY KEY (partition_id, off))
  WITH (autovacuum_enabled = off); -- a vacuum of one case's table would be counted in another's
CREATE UNIQUE INDEX ON queen_insert_keys.m_uuid (partition_id, transaction_id);
CREATE TABLE queen_insert_keys.m_bigint (LIKE queen_insert_keys.m_uuid) WITH (autovacuum_enabled = off); ALTER TABLE queen_insert_keys.m_bigint ALTER partition_id TYPE bigint USING 0;
ALTER TABLE queen_insert_keys.m_bigint ADD PRIMARY KEY (partition_id, off); CREATE UNIQUE INDEX ON queen_insert_keys.m_bigint (partition_id, transaction_id);
CREATE TABLE queen_insert_keys.m_seq (LIKE queen_insert_keys.m_uuid INCLUDING INDEXES) WITH (autovacuum_enabled = off);
CREATE TABLE queen_insert_keys.m_padded (LIKE queen_insert_keys.m_uuid INCLUDING INDEXES) WITH (autovacuum_enabled = off);
SQL
stmt() { # TABLE KEY TXID
  echo "INSERT INTO queen_insert_keys.$1 SELECT p.$2, nextval('queen_insert_keys.s'), gen_random_uuid(), $3, NULL, ('{\"d\":\"'||(SELECT p FROM queen_insert_keys.pl)||'\"}')::json, NULL, clock_timestamp() FROM generate_series(1,100) g JOIN queen_insert_keys.pa p ON p.num = 1 + (g % 100) ORDER BY 1,2;"
}
stmt m_uuid id "gen_random_uuid()::text" > "$dir/uuid.sql"
stmt m_bigint num "gen_random_uuid()::text" > "$dir/bigint.sql"
stmt m_seq id "(g%4)::text||'-'||currval('queen_insert_keys.s')::text" > "$dir/seq.sql"
stmt m_padded id "'t-'||lpad(currval('queen_insert_keys.s')::text,12,'0')" > "$dir/padded.sql"
cases="uuid bigint seq padded"
for c in $cases; do "$PGBENCH" -n "$U" -c 2 -t 2500 -f "$dir/$c.sql" >/dev/null; done # 500,000 rows each
"$PSQL" -q "$U" -c "VACUUM ANALYZE queen_insert_keys.m_uuid, queen_insert_keys.m_bigint, queen_insert_keys.m_seq, queen_insert_keys.m_padded"
# CPU ticks of the server: every live process, plus the children the
# postmaster reaped (the backends of finished pgbench runs). Read once the
# run's backends are gone, so none is counted both alive and reaped.
pm=$("$PSQL" -Atq "$U" -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
pm=$(awk '{print $4}' "/proc/$pm/stat")
[ "$(cat /proc/$pm/comm)" = postgres ] || { echo "insert-keys-pgbench: the server is not a postgres process on this host" >&2; exit 1; }
hz=$(getconf CLK_TCK)
idle=$(pgrep -P "$pm" | wc -l)
settle() { local i; for i in $(seq 1 500); do [ "$(pgrep -P "$pm" | wc -l)" -le "$idle" ] && return; sleep 0.01; done; }
cpu() { settle; local s=0 f; for p in $(pgrep -P "$pm") "$pm"; do f=($(cat "/proc/$p/stat" 2>/dev/null)) && s=$((s + f[13] + f[14])); done; f=($(cat "/proc/$pm/stat")); echo $((s + f[15] + f[16])); }
for r in 1 2 3; do for c in $cases; do
  c0=$(cpu); n=$("$PGBENCH" -n "$U" -c 4 -T 15 -f "$dir/$c.sql" | awk '/actually processed/{split($NF, a, "/"); print a[1]}'); c1=$(cpu)
  echo "round $r $c: $((n * 100 / 15)) rows/s, $(echo "scale=1; ($c1 - $c0) * 1000000 / $hz / ($n * 100)" | bc) us of server CPU per row"
done; done
