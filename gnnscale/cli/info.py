"""``gnnscale info``: node and edge counts, degrees, topology against feature bytes; for a typed graph its node
types (counts, feature widths) and relations (edges, in-degrees)."""

from __future__ import annotations

import argparse
import json

from gnnscale.cli.common import add_dataset_args, load_cli_dataset
from gnnscale.graph.dataset import describe_summary


def add_info_parser(sub) -> None:
    i = sub.add_parser("info", help="node/edge counts, degrees, topology vs feature bytes (typed graphs: per node type "
                                    "and relation)")
    add_dataset_args(i)
    i.add_argument("--json", action="store_true", help="print the summary as JSON (full precision, for scripts)")


def cmd_info(args: argparse.Namespace) -> None:
    summary = load_cli_dataset(args).summary()
    print(json.dumps(summary, indent=2) if args.json else describe_summary(summary))
