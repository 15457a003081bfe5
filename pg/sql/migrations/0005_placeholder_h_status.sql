-- PLACEHOLDER of branch h-status only: migrations must run 1, 2, 3... without
-- gaps (pg/migrate.go), and this branch's are 0006 and 0007. The lead drops
-- this file when merging (other branches bring the real 0005).
SELECT 1;
