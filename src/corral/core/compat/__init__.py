"""Compatibility policies that reproduce published simulators exactly (pure, stdlib)."""
