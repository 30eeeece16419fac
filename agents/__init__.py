"""The agents: the LLM and its prompts (llm/), the policy update and proposals (policy/), the
optimization loop (loop/), KernelBench runs (kernelbench/) and the learning replay (replay/),
each room importing only those before it; the CLIs and the agents worker at the top."""
