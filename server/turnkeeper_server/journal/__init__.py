"""The journal: turn transitions (compare-and-set, fencing) and their records,
re-drive, checkpoints, the counts for the metrics."""
