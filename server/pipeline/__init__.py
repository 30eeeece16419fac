"""The work the server runs: a save through the harness worker to diagnostics (save.py), and
optimize and writing a kernel through the agents worker. May import every room below:
server.editor, results, views and session."""
