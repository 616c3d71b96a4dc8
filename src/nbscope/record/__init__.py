"""Stage 2, record: the versioned run record, the cell model and the run store."""
