"""Renderers: terminal (rich), markdown and HTML views of run records."""
