-- Migration 5: cluster-wide switches every node reads (docs/api.md,
-- "Maintenance modes"). One row per switch, looked up by its primary key;
-- value is a JSON object, today {"enabled": bool}. Not per tenant: push and
-- pop maintenance exist for work on the shared database itself.
CREATE TABLE queen.system_state (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
