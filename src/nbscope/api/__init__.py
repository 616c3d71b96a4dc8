"""The public Python API: each function runs one job (collect, then record, then analyse) and returns data."""
