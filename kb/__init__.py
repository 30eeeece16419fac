"""Persistent per-user knowledge base: the learned policy (state -> technique -> gain)."""
