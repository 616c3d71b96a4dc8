"""Stage 1, collect: what runs and measures (the in-kernel probe, kernel runner, fingerprint, bench and loop workers, pathway executors)."""
