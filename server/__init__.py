"""The pygls language server, in rooms by LSP surface, lowest first: editor/, results/, views/,
session/, pipeline/, then the handlers (requests/, notifications/, commands/: one module per
LSP method or command); app.py wires them to the server. Each room imports only those before it."""
