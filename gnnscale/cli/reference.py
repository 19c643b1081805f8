"""The command-line reference, ``docs/cli.md``, rendered from the argparse parser itself.

The parser is made from the config dataclasses (:mod:`gnnscale.settings`, :mod:`gnnscale.cli.flags`), so
this page is too, and ``tests/test_docs.py`` fails when the committed file is stale. Regenerate with::

    python -m gnnscale.cli.reference > docs/cli.md

The output depends only on the parser: no terminal width, no usage lines wrapped by argparse's
formatter, no environment.
"""

from __future__ import annotations

import argparse

from gnnscale.cli.common import shown_default
from gnnscale.cli.entry import build_parser

REGENERATE = "python -m gnnscale.cli.reference > docs/cli.md"


def markdown() -> str:
    """The whole reference: a section per subcommand (and one for global options, if any)."""
    parser = build_parser()
    sections = [header()]
    global_options = option_actions(parser)
    if global_options:
        sections.append(section(parser.prog, "options before the subcommand", global_options))
    for name, (summary, sub) in subcommands(parser).items():
        sections.append(section(f"{parser.prog} {name}", summary, option_actions(sub)))
    return "\n".join(sections)


def header() -> str:
    """Title and provenance, so that a reader knows not to edit the file by hand."""
    return ("# Command-line reference\n\n"
            "Generated from the parser of `gnnscale/cli/`, itself made from the config dataclasses; do not edit\n"
            "by hand. Regenerate with "
            f"`{REGENERATE}` (`tests/test_docs.py` checks that it is current).\n"
            "`gnnscale SUBCOMMAND --help` prints the same options in the terminal.\n")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Every subcommand, in the order the parser declares them, with its one-line help.

    argparse keeps subparsers in a private ``_SubParsersAction``; its ``_choices_actions`` hold the
    help given to ``add_parser``, which the subparser itself does not keep. An alias maps to the
    same parser as its command, so it is documented once, under the command's name.
    """
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if all(sub is not seen for _, seen in found.values()):
                    found[name] = (helps.get(name, ""), sub)
    return found


def option_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions a user passes: everything but ``-h/--help`` and the subcommand dispatcher."""
    return [action for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))]


def section(title: str, summary: str, actions: list[argparse.Action]) -> str:
    """One markdown section: heading, summary sentence and the option table."""
    lines = [f"## `{title}`", ""]
    if summary:
        lines += [cell(summary[0].upper() + summary[1:]) + ".", ""]
    lines += ["| option | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| {names(a)} | {default(a)} | {meaning(a)} |" for a in actions]
    return "\n".join(lines) + "\n"


def names(action: argparse.Action) -> str:
    """``--flag``, its aliases, and the value it takes (``--checkpoint-every N``)."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"  # a positional argument
    takes_value = action.nargs != 0
    value = f" {metavar(action)}" if takes_value else ""
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings).replace("|", "\\|")


def metavar(action: argparse.Action) -> str:
    """The value's placeholder: its metavar, else the dest in capitals (choices go in the meaning column,
    where a long ``{a,b,c}`` does not widen the first column)."""
    if isinstance(action.metavar, str):
        return action.metavar
    return action.dest.rsplit(".", 1)[-1].upper()


def default(action: argparse.Action) -> str:
    """The value used when the option is not given, in words where there is no value."""
    if action.required:
        return "required"
    if action.nargs == 0:
        if action.default is argparse.SUPPRESS and not hasattr(action, "shown_default"):
            return "-"  # an action that stops the program (--version): it has no value to be off
        return "off"
    words = shown_default(action)
    return "-" if words is None else cell(f"`{words}`")


def meaning(action: argparse.Action) -> str:
    """The help text with argparse's ``%(...)s`` expanded, plus the allowed choices."""
    text = action.help or ""
    if text is argparse.SUPPRESS:
        text = ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        text = text % params
    if action.choices is not None:
        choices = ", ".join(f"`{c}`" for c in ordered(action.choices))
        text = f"{text} (one of {choices})" if text else f"one of {choices}"
    return cell(text)


def ordered(choices: object) -> list[object]:
    """Choices in declaration order; a set, which has none, sorted so that the output is stable."""
    if isinstance(choices, (set, frozenset)):
        return sorted(choices, key=str)
    return list(choices)  # type: ignore[call-overload]


def cell(text: str) -> str:
    """Text safe inside one markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


if __name__ == "__main__":
    print(markdown(), end="")
