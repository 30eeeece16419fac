"""Strip Nsight Compute's message markup, rendering it the way ncu's own CLI prints it.

Rule messages in a report carry links for the GUI: `@section:MemoryWorkloadAnalysis:Memory
Workload Analysis@` (a link to a section) and `@url:Profiling Guide:https://docs...#roofline@`
(a web link). ncu's CLI prints the first as its title and the second as `title (url)`.
"""

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
