-- Migration 3: a dead-letter entry stops counting as the message's last
-- resolution once its group's cursor is moved back over it (a seek) or the
-- group is deleted: the message is pending again, and may be completed
-- after. ack_v1 refuses a stale lease's completed ack only for a message
-- whose dead-letter entry is not superseded (docs/api.md, "Acks", rule 5).
ALTER TABLE queen.dead_letters ADD COLUMN superseded boolean NOT NULL DEFAULT false;
