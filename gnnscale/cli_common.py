"""What the subcommands of the command line share: dataset flags and loading, help layout, defaults."""

from __future__ import annotations

import argparse
import json

from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.train import api

DEFAULT_LAYOUT = "hybrid"
DEFAULT_TIMEOUT_S = api.DEFAULT_TIMEOUT_S


def key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every default, except for switches and options whose default is "not given"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == [] \
                or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def add_dataset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default=None, help=f"one of {', '.join(DATASETS)} (synthetic when not given)")
    p.add_argument("--data-dir", default=None, help="folder (or .npz file) holding the dataset's files")
    p.add_argument("--option", "-o", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="dataset option, e.g. -o num_nodes=100000 for synthetic (repeatable)")


def load_cli_dataset(args) -> NodeDataset:
    name = args.dataset or "synthetic"
    if args.data_dir is not None and name == "synthetic":
        raise ValueError("data_dir: --dataset synthetic is generated, it reads no --data-dir; drop --data-dir or "
                         "name the dataset stored there (--dataset)")
    return load_dataset(name, args.data_dir, **dict(args.option))
