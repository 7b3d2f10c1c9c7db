"""Scheme part: updates."""
