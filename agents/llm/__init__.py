"""The LLM side: the OpenAI-compatible client, prompt templates (prompts/*.md), parsing replies
(JSON, code blocks), and the agents built on them: lowering, soft verification, state
extraction. The lowest room of agents/: imports none of the others."""
