"""GNN layers and models over sampled Blocks: GraphSAGE, GCN, GAT."""

from gnnscale.nn.functional import KERNELS
from gnnscale.nn.layers import BACKENDS, GATConv, GCNConv, SAGEConv, aggregate_sum
from gnnscale.nn.models import GAT, GCN, MODELS, GraphSAGE, ModelConfig, build_model

__all__ = ["BACKENDS", "KERNELS", "GAT", "GATConv", "GCN", "GCNConv", "GraphSAGE", "MODELS", "ModelConfig", "SAGEConv",
           "aggregate_sum", "build_model"]
