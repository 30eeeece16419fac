"""MkDocs hook: the command-line reference, generated at build time from the `kernelblaster`
parsers themselves (docs/cli.md's marker is replaced by it), so the manual says what `--help`
says."""

from __future__ import annotations

import argparse
import html
from collections.abc import Iterator

MARKER = "<!-- cli-reference -->"
# Usage lines wrapped as a terminal of this width would wrap them, whatever the build's terminal.
WIDTH = 90


def on_page_markdown(markdown: str, **_: object) -> str:
    if MARKER not in markdown:
        return markdown
    # through the CLI's public builder only: it knows which module registers each command
    from kernelblaster.cli import build_parser

    return markdown.replace(MARKER, render(build_parser([])))


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown for every command and subcommand of `parser`: a heading, its help, its usage
    and a table of its arguments."""
    sections = []
    for depth, summary, command in [(1, None, parser), *_commands(parser)]:
        heading = "#" * min(depth + 1, 4)
        lines = [f"{heading} `{command.prog}`", ""]
        lines += [_text(summary), ""] if summary else []
        lines += [_text(command.description), ""] if command.description else []
        lines += ["```text", _usage(command).rstrip(), "```", ""]
        lines += _arguments(command)
        sections.append("\n".join(lines))
    return "\n".join(sections)


def _commands(
    parser: argparse.ArgumentParser, depth: int = 1
) -> Iterator[tuple[int, str | None, argparse.ArgumentParser]]:
    # argparse keeps subcommands and their help only in private attributes (sphinx-argparse
    # reads the same ones).
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        summaries = {choice.dest: choice.help for choice in action._choices_actions}
        for name, command in action.choices.items():
            yield depth, summaries.get(name), command
            yield from _commands(command, depth + 1)


def _formatter(command: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog=command.prog, width=WIDTH)


def _usage(command: argparse.ArgumentParser) -> str:
    formatter = _formatter(command)
    formatter.add_usage(command.usage, command._actions, command._mutually_exclusive_groups)
    return formatter.format_help()


def _arguments(command: argparse.ArgumentParser) -> list[str]:
    formatter = _formatter(command)
    rows = []
    subcommands: list[str] = []
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            subcommands += [f"`{name}`" for name in action.choices]
            continue
        invocation = formatter._format_action_invocation(action)
        described = _text(formatter._expand_help(action)) if action.help else ""
        rows.append(f"| `{invocation}` | {described} |")
    lines = []
    if rows:
        lines += ["| argument | what it does |", "|---|---|", *rows, ""]
    if subcommands:
        lines += [f"Subcommands: {', '.join(subcommands)}.", ""]
    return lines


def _text(text: str) -> str:
    """Help text as Markdown prose: HTML-escaped (`<problem>.cu` is no tag) and safe in a
    table cell."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")
