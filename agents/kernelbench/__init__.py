"""KernelBench runs: the problems, a problem's first kernel and optimization, its baselines,
the results files, their metrics and report. May import agents.llm, policy and loop."""
