-- Predicates shared by several functions, so each rule is written once.
-- They are LANGUAGE sql and IMMUTABLE, one expression each, so the planner
-- inlines them into the calling query: the plan is the one the expression
-- would give written out (checked with EXPLAIN, docs/storage.md).

-- queen.partition_pending: a (partition, group) has messages past the
-- group's cursor. p_committed is NULL when the group has no consumer row
-- for the partition yet (it has read nothing). Used by the claim core's
-- candidate scan (20_pop.sql) and the hot-list reseed (40_hotlist.sql).
CREATE OR REPLACE FUNCTION queen.partition_pending(p_last_offset bigint, p_committed bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_last_offset > COALESCE(p_committed, 0)
$$;

-- queen.group_gate_v2: the advisory lock key of a consumer group of a
-- tenant, on all its queues. Whatever makes consumer rows of a group
-- (queen.pop_v3, queen.provision_group_v1) holds it shared until it
-- commits; a group delete and a subscription update take it exclusively
-- before they lock the group's markers (pg/admin.go, pg/resources.go).
-- Unlike a row lock on a marker, an advisory lock queues fairly: a shared
-- request waits behind a waiting exclusive one, so claims that keep making
-- rows cannot hold a delete off. One key per (tenant, group), not per
-- queue: a delete of every queue then needs no list of markers, which a
-- claim could add to after it was read, and one lock, not one per queue.
-- Two groups whose keys collide only wait for each other.
CREATE OR REPLACE FUNCTION queen.group_gate_v2(p_tenant text, p_group text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended('queen.group:' || p_tenant || '/' || p_group, 0)
$$;

-- Its per-queue form, of function set 13: this tree calls none of it, but a
-- node of that set restarting during a rollout does (its deletes then take
-- other keys than the new claims: finish the rollout, docs/storage.md).
CREATE OR REPLACE FUNCTION queen.group_gate(p_queue uuid, p_group text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended('queen.group:' || p_queue::text || '/' || p_group, 0)
$$;
