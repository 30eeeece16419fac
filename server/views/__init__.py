"""What the editor shows, made from results by pure functions: diagnostics, hover text, code
actions and lenses, the profile view, and the formatting they share. May import server.editor
and server.results."""
