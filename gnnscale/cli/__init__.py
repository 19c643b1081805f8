"""The ``gnnscale`` command: one module per command (``train``, ``predict``, ``partition``, ``info``,
``generate``, ``convert``), their flags made from the typed configs (:mod:`gnnscale.cli.flags`)."""

from gnnscale.cli.common import EXIT_BAD_INPUT, name_the_flag
from gnnscale.cli.entry import build_parser, check_train_flags, entry_point, main, report, subcommand_parser

__all__ = ["EXIT_BAD_INPUT", "build_parser", "check_train_flags", "entry_point", "main", "name_the_flag", "report",
           "subcommand_parser"]
