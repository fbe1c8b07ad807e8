-- Refresh the planner's statistics of a policy's table after a run deleted a large
-- share of it (pt-archiver's --analyze): ANALYZE reads a sample of the rows (of every
-- partition, for a partitioned table). It takes SHARE UPDATE EXCLUSIVE, which blocks
-- neither reads nor writes but waits for a VACUUM or ANALYZE of the same table.
ANALYZE {table}
