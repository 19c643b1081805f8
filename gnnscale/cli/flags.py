"""The command line made from the config dataclasses: one option per flagged field (:mod:`gnnscale.settings`).

:func:`add_settings` adds a class's flags to a parser; :func:`read_settings` builds the class from what the
user typed (the dataclass's own defaults for the rest, so no default is written twice); :func:`given`
lists which of its flags were typed. Each option's dest is ``ClassName.field``, so two classes may have
fields of the same name, and an option the user did not type is absent from the namespace (its argparse
default is ``SUPPRESS``).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path

from gnnscale.settings import Flag, flag_fields, option_string


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints such as 10,5, got {text!r}") from None


def float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 0.85,0.05,0.10, got {text!r}") \
            from None


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


PARSERS = {int: whole_number, float: number, str: str, Path: str}


def dest(cls: type, field: dataclasses.Field) -> str:
    return f"{cls.__name__}.{field.name}"


def value_types(cls: type, field: dataclasses.Field) -> tuple[type, ...]:
    """The field's annotated types, None left out (``int | None`` -> ``(int,)``)."""
    hint = typing.get_type_hints(cls)[field.name]
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    # A Literal of strings (ModelConfig.name) is read as a str and checked against the field's choices.
    return tuple(str if typing.get_origin(arg) is typing.Literal else arg for arg in args if arg is not type(None))


def default_words(field: dataclasses.Field, flag: Flag) -> str | None:
    """What ``--help`` says the default is (None: nothing to say, as for an off switch)."""
    if flag.default_text is not None:
        return flag.default_text
    value = field.default
    if value is None or isinstance(value, bool) or value == ():
        return None
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def add_settings(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type) -> None:
    """One option per flagged field of ``cls``, typed by the field's annotation; a field whose flag names a
    ``group`` is listed under that section of ``--help`` (made once per title)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for field, flag in flag_fields(cls):
        target = parser
        if flag.group is not None:
            if flag.group not in groups:
                groups[flag.group] = parser.add_argument_group(flag.group)
            target = groups[flag.group]
        add_option(target, cls, field, flag)


def add_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, field: dataclasses.Field,
               flag: Flag) -> None:
    """The option of one field (see :func:`add_settings`)."""
    kinds = value_types(cls, field)
    common = dict(dest=dest(cls, field), default=argparse.SUPPRESS, help=flag.help, required=flag.required)
    name = option_string(cls, field, flag)
    if kinds == (bool,):
        action = "store_false" if flag.negate is not None else "store_true"
        added = parser.add_argument(name, action=action, **common)
    elif bool in kinds:  # a switch that may also take one of its choices (--resume, --resume auto)
        added = parser.add_argument(name, nargs="?", const=True, choices=flag.allowed(), metavar=flag.metavar,
                                    **common)
    elif typing.get_origin(kinds[0]) is tuple and typing.get_args(kinds[0])[0] in (str, Path):
        # Several words, one file each (--edges a.npy b.npy); read back as a tuple (given()).
        added = parser.add_argument(name, nargs="+", metavar=flag.metavar or "FILE", **common)
    elif typing.get_origin(kinds[0]) is tuple:
        floats = typing.get_args(kinds[0])[0] is float
        added = parser.add_argument(name, type=float_list if floats else int_list,
                                    metavar=flag.metavar or ("F,F" if floats else "N,N"), **common)
    else:
        choices = flag.allowed()
        metavar = flag.metavar or (None if choices else field.name.upper())
        added = parser.add_argument(name, type=PARSERS[kinds[0]], choices=choices, metavar=metavar, **common)
    # argparse's default is SUPPRESS (an untyped flag stays out of the namespace): --help and
    # docs/cli.md read the field's default from here instead.
    added.shown_default = default_words(field, flag)


def given(cls: type, args: argparse.Namespace) -> dict[str, object]:
    """``{field name: value}`` for the flags of ``cls`` the user typed."""
    typed = vars(args)
    values = {field.name: typed[dest(cls, field)] for field, _ in flag_fields(cls) if dest(cls, field) in typed}
    return {name: tuple(value) if isinstance(value, list) else value for name, value in values.items()}


def given_flags(cls: type, args: argparse.Namespace) -> list[str]:
    """The flags of ``cls`` the user typed, as typed (for messages)."""
    typed = given(cls, args)
    return [option_string(cls, field, flag) for field, flag in flag_fields(cls) if field.name in typed]


def read_settings(cls: type, args: argparse.Namespace, **fixed: object):
    """``cls`` from the typed flags, ``fixed`` values and the class's defaults for the rest."""
    return cls(**fixed, **given(cls, args))
