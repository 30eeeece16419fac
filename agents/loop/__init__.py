"""The MAIC-RL optimization loop: the run and its rollouts, the harness evaluations they queue
per GPU, where each step's time went, and writing a first kernel (init_kernel.py). May import
agents.llm and agents.policy."""
