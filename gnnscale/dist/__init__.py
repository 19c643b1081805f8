"""Distributed execution: the process group, collectives with accounting, partitioned features, and
sampling in the vanilla (partitioned topology) and hybrid (replicated topology) layouts."""

from gnnscale.dist.comm import CATEGORIES, AgreementFailure, Comm, CommStats, PeerFailure
from gnnscale.dist.context import DistContext, init_for_test, init_from_env, shutdown
from gnnscale.dist.features import PartitionedFeatureStore
from gnnscale.dist.sampling import HybridSampler, VanillaSampler

__all__ = ["CATEGORIES", "AgreementFailure", "Comm", "CommStats", "DistContext", "HybridSampler",
           "PartitionedFeatureStore", "PeerFailure", "VanillaSampler", "init_for_test", "init_from_env",
           "shutdown"]
