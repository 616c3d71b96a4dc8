"""Stage 2, collect: what runs and measures (the in-kernel probe, the kernel runner and the kernel logs of traced
tools, the fingerprint, the bench and loop workers); it writes cells and programs with the schema's model."""
