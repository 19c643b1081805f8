"""Distributed execution.

Infrastructure for every layout: the process group (:mod:`.context`), collectives with accounting
(:mod:`.comm`), sampling in the hybrid and vanilla layouts (:mod:`.sampling`), the gradient all-reduce
(:mod:`.gradients`) and the edge metrics (:mod:`.edge_metrics`). Then one sub-package per strategy:
:mod:`.split`, :mod:`.matrix`, :mod:`.dgs`. The feature stores fetch through these collectives one
stage up, in :mod:`gnnscale.features`."""


from gnnscale.distributed.comm import CATEGORIES, AgreementFailure, Comm, CommStats, PeerFailure
from gnnscale.distributed.context import DistContext, init_for_test, init_from_env, shutdown
from gnnscale.distributed.gradients import all_reduce_gradients
from gnnscale.distributed.split.owner import OwnerSplitWorkspace, owner_split_blocks
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.distributed.split.shuffle import (CooperativeBlock, InputAhead, Shuffle, cooperative_blocks,
                                          exchange_input_ahead, split_loss)
from gnnscale.distributed.split.plan import SHUFFLE_FOR_MODEL, SHUFFLE_KINDS, ShufflePlan, SplitBlock, split_blocks
from gnnscale.distributed.edge_metrics import EdgeMetrics, data_parallel_edge_metrics, split_edge_metrics

__all__ = ["CATEGORIES", "SHUFFLE_FOR_MODEL", "SHUFFLE_KINDS", "AgreementFailure", "Comm", "CommStats",
           "CooperativeBlock", "DistContext", "EdgeMetrics", "HybridSampler", "InputAhead", "OwnerSplitWorkspace",
           "PeerFailure", "Shuffle", "ShufflePlan", "SplitBlock", "VanillaSampler", "all_reduce_gradients",
           "cooperative_blocks", "exchange_input_ahead", "owner_split_blocks",
           "data_parallel_edge_metrics", "init_for_test", "init_from_env", "shutdown", "split_blocks",
           "split_edge_metrics", "split_loss"]
