"""Distributed execution: the process group, collectives with accounting, partitioned features, and
sampling in the vanilla (partitioned topology) and hybrid (replicated topology) layouts."""

from gnnscale.distributed.comm import CATEGORIES, AgreementFailure, Comm, CommStats, PeerFailure
from gnnscale.distributed.context import DistContext, init_for_test, init_from_env, shutdown
from gnnscale.distributed.features import PartitionedFeatureStore
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler

__all__ = ["CATEGORIES", "AgreementFailure", "Comm", "CommStats", "DistContext", "HybridSampler",
           "PartitionedFeatureStore", "PeerFailure", "VanillaSampler", "init_for_test", "init_from_env",
           "shutdown"]
