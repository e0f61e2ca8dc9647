"""Test harness shipped with arfl, for its own tests and for users' (like ``kazoo.testing``)."""

from __future__ import annotations

from arfl.stack.embedded import EmbeddedStack, free_ports

__all__ = ["EmbeddedStack", "free_ports"]
