"""Stage 3, analyse: compare, diagnose, gate, history, timelines and forecasts; returns data, never prints."""
