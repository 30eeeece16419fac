"""Strip Nsight Compute's message markup (GUI links such as `@section:Id:Title@` and
`@url:Title:https://...@`), rendering it as ncu's own CLI prints it."""

from __future__ import annotations

import re

# @<kind>:<target>:<title>@ for sections, @url:<title>:<url>@ for links; titles hold no '@'.
_SECTION = re.compile(r"@section:[^:@]*:([^@]*)@")
_URL = re.compile(r"@url:([^:@]*):([^@]*)@")
# Any other @kind:...:title@ (future markup kinds): keep the last field, the visible text.
_OTHER = re.compile(r"@[a-z_]+:(?:[^:@]*:)*([^:@]*)@")


def strip_markup(message: str) -> str:
    """`message` with ncu's link markup replaced by its visible text."""
    text = _SECTION.sub(r"\1", message)
    text = _URL.sub(r"\1 (\2)", text)
    return _OTHER.sub(r"\1", text)
