"""The JSON-lines channel from a worker process to its parent, on fd 1. Claiming it moves everything
else that would print to stdout (user code, a launcher's printf, a library's banner) to stderr, so
nothing can corrupt the protocol."""

from __future__ import annotations

import os
import sys

import msgspec


class ProtocolStream:
    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._encoder = msgspec.json.Encoder()

    def emit(self, message: msgspec.Struct) -> None:
        self._out.write(self._encoder.encode(message) + b"\n")
        self._out.flush()
