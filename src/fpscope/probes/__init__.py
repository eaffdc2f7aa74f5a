"""Arithmetic feature probes: each module finds one property of a black-box operation."""
