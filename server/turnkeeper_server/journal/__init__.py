"""The journal: turn transitions (compare-and-set, fencing), re-drive, checkpoints."""
