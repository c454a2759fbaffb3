"""Replay step: a device's events into allocation lifetimes (alloc/free pairing) and the
active and reserved memory curves."""
