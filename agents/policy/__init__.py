"""The policy's updates: the textual-gradient update of the KB after a run (update.py) and new
techniques proposed where the KB has none left (proposals.py). May import agents.llm."""
