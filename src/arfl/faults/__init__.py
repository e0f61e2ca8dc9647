"""Fault kinds (chaos): a registry of kinds, each with ``inject`` and ``revert``."""
