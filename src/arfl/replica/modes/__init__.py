"""Replication modes (none, passive, active-leader, active-leaderless)."""
