"""MkDocs hook: a page's link to a repository file outside docs/ (a results file, an example)
becomes a link to that file in the repository on GitHub, and a link to a file the site
includes as a page (ARCHITECTURE.md) goes to that page; an image of the repository outside
docs/ (a results plot) is copied into the site, under COPIES, and shown from there. A link to
a file that doesn't exist is a warning, which `mkdocs build --strict` fails on, as it does for
links inside docs/."""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.repo_links")

# The repository's files that are pages of the site, each with its page.
PAGES = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "architecture.md",
    "CONTRIBUTING.md": "contributing.md",
}
# Where the site keeps its copies of the repository's images (the site fetches nothing from
# elsewhere, and a plot stays beside its result file in the repository).
COPIES = "repository"
# An inline link or image target, up to its optional title: ](target) or ](target "title").
_LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_IMAGE = re.compile(r"(!\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_FENCE = re.compile(r"[ \t]*(```|~~~)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: object) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = Path(config["config_file_path"]).resolve().parent
    page_path = docs / page.file.src_uri
    page_dir = posixpath.dirname(page.file.src_uri) or "."
    repo_url = config["repo_url"].rstrip("/")

    def in_repository(target: str) -> Path | None:
        """The repository file outside docs/ that `target` names; None for anything else (a
        URL, an anchor, a page of docs/: MkDocs checks those itself)."""
        path = target.partition("#")[0]
        if not path or "://" in path or path.startswith(("/", "mailto:")):
            return None
        resolved = Path(posixpath.normpath((page_path.parent / path).as_posix()))
        return None if resolved.is_relative_to(docs) else resolved

    def copied(match: re.Match[str]) -> str:
        resolved = in_repository(match.group(2))
        if resolved is None or not resolved.is_relative_to(repo) or not resolved.is_file():
            return match.group(0)  # relinked() says what is wrong with it
        uri = f"{COPIES}/{resolved.relative_to(repo).as_posix()}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(resolved)))
        return match.group(1) + posixpath.relpath(uri, page_dir) + match.group(3)

    def relinked(match: re.Match[str]) -> str:
        target = match.group(2)
        path, _, anchor = target.partition("#")
        resolved = in_repository(target)
        if resolved is None:
            return match.group(0)
        if not resolved.is_relative_to(repo) or not resolved.exists():
            log.warning("%s links to %s, which is not in the repository", page.file.src_uri, path)
            return match.group(0)
        in_repo = resolved.relative_to(repo).as_posix()
        if in_repo in PAGES:
            new = posixpath.relpath(PAGES[in_repo], page_dir)
        else:
            kind = "tree" if resolved.is_dir() else "blob"
            new = f"{repo_url}/{kind}/main/{in_repo}"
        return match.group(1) + new + (f"#{anchor}" if anchor else "") + match.group(3)

    # links inside fenced code are code, not links
    lines, fence = [], ""
    for line in markdown.splitlines(keepends=True):
        marker = _FENCE.match(line)
        if marker and not fence:
            fence = marker.group(1)
        elif marker and marker.group(1) == fence:
            fence = ""
        elif not fence:
            line = _LINK.sub(relinked, _IMAGE.sub(copied, line))
        lines.append(line)
    return "".join(lines)
