"""Scheme part: base."""
