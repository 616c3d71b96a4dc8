"""Analyses of run records: they return data and never print."""
