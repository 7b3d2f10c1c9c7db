"""Scheme part: gradients."""
