"""The learning replay: the loop run on a measured table of rewrites (table.py) instead of a
GPU and an LLM (mode.py). May import agents.llm, policy and loop."""
