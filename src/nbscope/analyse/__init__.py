"""Stage 4, analyse: compare, diagnose, gate, history, attribution and forecasts; returns data, never prints."""
