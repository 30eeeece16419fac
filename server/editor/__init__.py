"""The editor's side as the server sees it: open documents and positions, the kernels in a text,
the client's settings, workspace trust, watched files, and the JSON-RPC and progress reports it
speaks. The lowest room of server/: imports none of the others."""
