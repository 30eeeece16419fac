"""The session: the server object and the state its features share (settings, trust, the job
queue and GPU slots, builds ahead of a save), and keeping its settings current. May import
server.editor, results and views."""
