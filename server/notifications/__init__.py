"""The handlers of LSP notifications, one module per method, named after it (`did_save.py` for
`textDocument/didSave`). May import every room below: server.editor, results, views, session and
pipeline; not the other handler rooms."""
