"""One source for every setting: a field of a config dataclass declares its command-line flag beside its
default, type and validation.

``setting(default, "help")`` is a dataclass field whose metadata holds a :class:`Flag`. The command line
(:mod:`gnnscale.cli.flags`) adds one option per such field, with the field's type, its help and its
default; ``docs/cli.md`` is rendered from that parser; and a library error that starts with a field's
name (``batch_size: expected an int >= 1, got 0``) is shown with the flag the user typed
(``--batch-size: ...``) by looking the name up here. A new field is a new flag: nothing else maps flags
to fields. This module sits at the base: configs of every stage declare their flags with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """How one config field appears on the command line.

    Args:
        help: one or two sentences for ``--help`` and ``docs/cli.md``.
        name: the option string; default ``"--"`` + the class's ``FLAG_PREFIX`` + the field name with dashes.
        choices: the allowed values, or a function returning them (a registry read when the parser is built).
        metavar: the value's placeholder in help.
        negate: for a bool field that is on by default: the switch that turns it off (``--no-eval``).
        default_text: what ``--help`` says for the default where the value alone does not say it (a None
            that means "derived from other settings").
        aliases: other names the library gives the same setting in its error messages (``num_parts`` for
            ``--parts``), so that those messages name the flag too.
        required: the command cannot run without it (its default, None, is never used by the command line).
        group: the ``--help`` section the flag is listed under (None: the command's own options).
        resumable: a run resumed from a checkpoint may change it (it changes no number the run computes;
            :data:`gnnscale.train.checkpoints.runs.RESUMABLE_CHANGES`).
    """

    help: str
    name: str | None = None
    choices: tuple | Callable[[], tuple] | None = None
    metavar: str | None = None
    negate: str | None = None
    default_text: str | None = None
    aliases: tuple[str, ...] = ()
    required: bool = False
    group: str | None = None
    resumable: bool = False

    def allowed(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices


def setting(default: Any, help: str, **flag: Any) -> Any:
    """A dataclass field with ``default`` that the command line sets (keyword arguments: :class:`Flag`'s)."""
    return dataclasses.field(default=default, metadata={"flag": Flag(help=help, **flag)})


def field_default(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (a slots dataclass keeps no class attribute for it)."""
    for field in dataclasses.fields(cls):
        if field.name == name:
            return field.default
    raise AttributeError(f"{cls.__name__} has no field {name!r}")


def flag_fields(cls: type) -> list[tuple[dataclasses.Field, Flag]]:
    """The fields of ``cls`` that have a flag, in declaration order."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(cls) if "flag" in f.metadata]


def option_string(cls: type, field: dataclasses.Field, flag: Flag) -> str:
    """The flag a user types for ``field`` of ``cls`` (``--dgs-period`` for DGSConfig.period)."""
    if flag.negate is not None:
        return flag.negate
    if flag.name is not None:
        return flag.name
    return "--" + getattr(cls, "FLAG_PREFIX", "") + field.name.replace("_", "-")


def flag_names(cls: type) -> dict[str, str]:
    """``{field name or alias: the flag that sets it}`` for the flagged fields of ``cls``."""
    names = {}
    for field, flag in flag_fields(cls):
        typed = option_string(cls, field, flag)
        for name in (field.name, *flag.aliases):
            names[name] = typed
    return names


def resumable_fields(cls: type) -> tuple[str, ...]:
    """The names of the fields of ``cls`` whose flag says a resumed run may change them."""
    return tuple(field.name for field, flag in flag_fields(cls) if flag.resumable)
