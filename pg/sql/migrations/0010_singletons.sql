-- Leases of cluster-wide singletons (the retention pass): one row per name,
-- held by one session token until a time, renewed while the work runs. A
-- lease instead of a session-level advisory lock, because a session does not
-- survive a transaction-mode pooler (docs/operations.md, "Behind PgBouncer")
-- and a lease does: it is an ordinary row.
CREATE TABLE queen.singletons (
    name   text PRIMARY KEY,
    holder uuid NOT NULL,          -- the session's token
    node   text NOT NULL,          -- for operators: who holds it
    until  timestamptz NOT NULL    -- free once past, by PostgreSQL's clock
);
