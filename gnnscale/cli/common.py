"""What the commands share: the parser that reports a bad flag in one line, the dataset flags, and the
map from a library message's leading name to the flag the user typed."""

from __future__ import annotations

import argparse
import json
import re
import sys
import typing
from dataclasses import dataclass

from gnnscale.cli.flags import add_settings, read_settings
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.settings import flag_names, setting
from gnnscale.train.api import DEFAULT_TIMEOUT_S  # noqa: F401 (--timeout's default, the library's)

EXIT_BAD_INPUT = 2  # bad input, reported before any work (argparse's own errors exit with 2 too)
# A value that starts with a minus sign, such as --fanouts -1,5: argparse would take it for a flag.
NEGATIVE_VALUE = re.compile(r"-\d[\d,.eE+-]*")


def shown_default(action: argparse.Action) -> str | None:
    """The default ``--help`` and ``docs/cli.md`` show, None where there is nothing to show (an off switch,
    a value that is "not given"). A generated option has none for argparse (:mod:`gnnscale.cli.flags`):
    its field's default rides on the action."""
    if hasattr(action, "shown_default"):
        return action.shown_default
    if action.default in (None, False, [], argparse.SUPPRESS):
        return None
    if isinstance(action.default, (tuple, list)):
        return ",".join(str(v) for v in action.default)
    return str(action.default)


class HelpWithDefaults(argparse.HelpFormatter):
    """``--help`` shows every option's default that has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        words = shown_default(action)
        if words is None or action.help is argparse.SUPPRESS or action.nargs == 0:
            return action.help
        return f"{action.help} (default: {words})"


class UsageError(SystemExit):
    """A malformed command line, already reported in one line: exit status 2 (as argparse's own)."""


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported in one line (``gnnscale train: error: argument --fanouts: ...``)
    instead of the usage block, and ``--flag -1,5`` read as the flag's value."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpWithDefaults)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise UsageError(EXIT_BAD_INPUT)

    def parse_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        joined: list[str] = []
        for token in argv:
            if joined and joined[-1].startswith("--") and "=" not in joined[-1] and NEGATIVE_VALUE.fullmatch(token):
                joined[-1] = f"{joined[-1]}={token}"
            else:
                joined.append(token)
        parsed, unknown = self.parse_known_args(joined, namespace)
        if unknown:  # reported by the subcommand's parser: its --help lists the flags the user meant
            command = getattr(parsed, "command", None)
            (self if command is None else subcommand_parser(self, command)).error(
                f"unrecognized arguments: {' '.join(unknown)}")
        return parsed


def subcommand_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``gnnscale COMMAND`` (argparse keeps subparsers in its private ``_SubParsersAction``)."""
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict) and command in action.choices:
            return action.choices[command]
    raise KeyError(command)


def key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetFlags:
    """Which dataset a command reads. ``name`` and ``directory`` are what the loaders call them in errors."""

    dataset: str | None = setting(None, f"one of {', '.join(DATASETS)}", default_text="synthetic", aliases=("name",))
    data_dir: str | None = setting(None, "folder (or .npz file) holding the dataset's files", metavar="DIR",
                                   aliases=("directory",))


def add_dataset_args(p: argparse.ArgumentParser) -> None:
    add_settings(p, DatasetFlags)
    p.add_argument("--option", "-o", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="dataset option, e.g. -o num_nodes=100000 for synthetic (repeatable)")


def dataset_flags(args) -> DatasetFlags:
    return read_settings(DatasetFlags, args)


def load_cli_dataset(args) -> NodeDataset | TypedDataset:
    """The dataset the flags name (a typed graph's too: every command that loads one reads both)."""
    flags = dataset_flags(args)
    name = flags.dataset or "synthetic"
    if flags.data_dir is not None and name == "synthetic":
        raise ValueError("data_dir: --dataset synthetic is generated, it reads no --data-dir; drop --data-dir or "
                         "name the dataset stored there (--dataset)")
    return load_dataset(name, flags.data_dir, **dict(args.option))


def typed_flags(parser: argparse.ArgumentParser, settings: tuple[type, ...]) -> dict[str, str]:
    """``{name: flag}`` for a command: the fields (and their aliases) of its settings classes, then its own
    options by dest (``--quiet`` -> ``quiet``). The dataset's names come last, for a command that reads a
    dataset: a loader's ``name`` is ``--dataset``."""
    names: dict[str, str] = {}
    for cls in settings:
        names.update(flag_names(cls))
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and "." not in action.dest and action.dest not in names:
            names[action.dest] = longs[0]
    if any("--dataset" in action.option_strings for action in parser._actions):
        names.update(flag_names(DatasetFlags))
    return names


def name_the_flag(message: str, flags: dict[str, str]) -> str:
    """``batch_size: ...`` -> ``--batch-size: ...``: library messages start with the setting's name, but
    the user typed a flag. A message that also names it in brackets (``expected an int >= 1 (--bulk)``)
    loses the brackets: the flag twice helps no one."""
    name, sep, rest = message.partition(": ")
    if not sep or name not in flags:
        return message
    flag = flags[name]
    return f"{flag}: {rest.replace(f' ({flag})', '')}"

