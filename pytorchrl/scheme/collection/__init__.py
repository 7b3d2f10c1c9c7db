"""Scheme part: collection."""
