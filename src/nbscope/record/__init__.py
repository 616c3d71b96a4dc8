"""Stage 3, record: the versioned run record (its cells are the schema's model), the live files and the run store."""
