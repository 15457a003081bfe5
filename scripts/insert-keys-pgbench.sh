#!/usr/bin/env bash
# insert-keys-pgbench.sh PG_URL: what the message table's keys cost an insert,
# with pgbench (docs/benchmarks.md, "tenth session"). Tables shaped as
# queen.messages in a scratch schema "kx" of PG_URL's database (dropped at the
# end); 100 rows per statement, one per partition of 100; 4 clients, 15 s per
# case, the cases interleaved, three rounds. Prints the CPU of every server
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
dir=$(mktemp -d); trap 'rm -rf "$dir"; "$PSQL" -q "$U" -c "DROP SCHEMA IF EXISTS kx CASCADE" >/dev/null 2>&1 || true' EXIT
"$PSQL" -q -v ON_ERROR_STOP=1 "$U" <<'SQL'
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS kx CASCADE; CREATE SCHEMA kx;
CREATE TABLE kx.pa (id uuid PRIMARY KEY, num bigint GENERATED ALWAYS AS IDENTITY UNIQUE);
INSERT INTO kx.pa (id) SELECT gen_random_uuid() FROM generate_series(1, 100);
CREATE SEQUENCE kx.s;
CREATE TABLE kx.pl (p text); INSERT INTO kx.pl SELECT repeat('x', 256);
CREATE TABLE kx.m_uuid (partition_id uuid NOT NULL, off bigint NOT NULL, id uuid NOT NULL, transaction_id text NOT NULL,
  trace_id uuid, payload json, producer_sub text, created_at timestamptz NOT NULL, PRIMARY KEY (partition_id, off));
CREATE UNIQUE INDEX ON kx.m_uuid (partition_id, transaction_id);
CREATE TABLE kx.m_bigint (LIKE kx.m_uuid); ALTER TABLE kx.m_bigint ALTER partition_id TYPE bigint USING 0;
ALTER TABLE kx.m_bigint ADD PRIMARY KEY (partition_id, off); CREATE UNIQUE INDEX ON kx.m_bigint (partition_id, transaction_id);
CREATE TABLE kx.m_seq (LIKE kx.m_uuid INCLUDING INDEXES);
CREATE TABLE kx.m_padded (LIKE kx.m_uuid INCLUDING INDEXES);
SQL
stmt() { # TABLE KEY TXID
  echo "INSERT INTO kx.$1 SELECT p.$2, nextval('kx.s'), gen_random_uuid(), $3, NULL, ('{\"d\":\"'||(SELECT p FROM kx.pl)||'\"}')::json, NULL, clock_timestamp() FROM generate_series(1,100) g JOIN kx.pa p ON p.num = 1 + (g % 100) ORDER BY 1,2;"
}
stmt m_uuid id "gen_random_uuid()::text" > "$dir/uuid.sql"
stmt m_bigint num "gen_random_uuid()::text" > "$dir/bigint.sql"
stmt m_seq id "(g%4)::text||'-'||currval('kx.s')::text" > "$dir/seq.sql"
stmt m_padded id "'t-'||lpad(currval('kx.s')::text,12,'0')" > "$dir/padded.sql"
cases="uuid bigint seq padded"
for c in $cases; do "$PGBENCH" -n "$U" -c 2 -t 2500 -f "$dir/$c.sql" >/dev/null; done # 500,000 rows each
# CPU ticks of the server: every live process, plus the children the
# postmaster reaped (the backends of finished pgbench runs).
pm=$("$PSQL" -Atq "$U" -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
pm=$(awk '{print $4}' "/proc/$pm/stat")
hz=$(getconf CLK_TCK)
cpu() { local s=0 f; for p in $(pgrep -P "$pm") "$pm"; do f=($(cat "/proc/$p/stat" 2>/dev/null)) && s=$((s + f[13] + f[14])); done; f=($(cat "/proc/$pm/stat")); echo $((s + f[15] + f[16])); }
for r in 1 2 3; do for c in $cases; do
  c0=$(cpu); n=$("$PGBENCH" -n "$U" -c 4 -T 15 -f "$dir/$c.sql" | awk '/actually processed/{split($NF, a, "/"); print a[1]}'); c1=$(cpu)
  echo "round $r $c: $((n * 100 / 15)) rows/s, $(echo "scale=1; ($c1 - $c0) * 1000000 / $hz / ($n * 100)" | bc) us of server CPU per row"
done; done
