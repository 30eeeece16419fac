"""Reasoning on top of the harness and the KB: state classification, LLM agents, the loop."""
