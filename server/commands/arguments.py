"""A command's one argument object, converted to its record or refused with Invalid Params."""

from __future__ import annotations

from typing import Any

import msgspec
from pygls.exceptions import JsonRpcInvalidParams


def argument(args: tuple[Any, ...], kind: type[msgspec.Struct], command: str) -> Any:
    if len(args) != 1:
        raise JsonRpcInvalidParams(f"{command} takes one argument object, got {len(args)}")
    try:
        return msgspec.convert(args[0], kind)
    except msgspec.ValidationError as exc:
        raise JsonRpcInvalidParams(f"{command}: {exc}") from exc
