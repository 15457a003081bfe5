-- Migration 11: consumers.provisional marks a cursor the bulk provisioning
-- placed (queen.provision_group_v1) that the group has not read since: no
-- claim took from it and no seek moved it. A subscription update moves
-- such cursors to the new start, as the group's first read would have
-- placed them there (docs/storage.md, "Bulk provisioning"). Adding a
-- column with a constant default rewrites nothing.
ALTER TABLE queen.consumers ADD COLUMN IF NOT EXISTS provisional boolean NOT NULL DEFAULT false;
