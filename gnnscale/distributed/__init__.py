"""Distributed execution: the process group, collectives with accounting, partitioned features,
sampling in the vanilla (partitioned topology) and hybrid (replicated topology) layouts, and split
parallelism (online splitting, cooperative layers, edge metrics)."""

from gnnscale.distributed.comm import CATEGORIES, AgreementFailure, Comm, CommStats, PeerFailure
from gnnscale.distributed.context import DistContext, init_for_test, init_from_env, shutdown
from gnnscale.distributed.features import PartitionedFeatureStore
from gnnscale.distributed.gradients import all_reduce_gradients
from gnnscale.distributed.owner_split import OwnerSplitWorkspace, owner_split_blocks
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.distributed.shuffle import (CooperativeBlock, InputAhead, Shuffle, cooperative_blocks,
                                          exchange_input_ahead, split_loss)
from gnnscale.distributed.split import SHUFFLE_FOR_MODEL, SHUFFLE_KINDS, ShufflePlan, SplitBlock, split_blocks
from gnnscale.distributed.split_metrics import EdgeMetrics, data_parallel_edge_metrics, split_edge_metrics

__all__ = ["CATEGORIES", "SHUFFLE_FOR_MODEL", "SHUFFLE_KINDS", "AgreementFailure", "Comm", "CommStats",
           "CooperativeBlock", "DistContext", "EdgeMetrics", "HybridSampler", "InputAhead", "OwnerSplitWorkspace",
           "PartitionedFeatureStore",
           "PeerFailure", "Shuffle", "ShufflePlan", "SplitBlock", "VanillaSampler", "all_reduce_gradients",
           "cooperative_blocks", "exchange_input_ahead", "owner_split_blocks",
           "data_parallel_edge_metrics", "init_for_test", "init_from_env", "shutdown", "split_blocks",
           "split_edge_metrics", "split_loss"]
