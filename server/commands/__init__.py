"""The handlers of the `kernelblaster.*` commands (`workspace/executeCommand`), one module per
command, named after it (`optimize.py` for `kernelblaster.optimize`). May import every room
below: server.editor, results, views, session and pipeline; not the other handler rooms.
pygls resolves a command's type hints, so its module imports KernelBlasterServer at run time."""
