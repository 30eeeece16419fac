"""The handlers of LSP requests, one module per method, named after it (`hover.py` answers
`textDocument/hover`). May import every room below: server.editor, results, views, session and
pipeline; not the other handler rooms."""
