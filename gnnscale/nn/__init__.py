"""GNN layers and models over sampled Blocks: GraphSAGE, GCN, GAT; over typed blocks: R-GCN, R-SAGE, R-GAT."""

from gnnscale.nn.functional import KERNELS
from gnnscale.nn.layers import BACKENDS, GATConv, GCNConv, SAGEConv, aggregate_sum
from gnnscale.nn.models import GAT, GCN, MODELS, GraphSAGE, ModelConfig, build_model
from gnnscale.nn.relational import RGATConv, RGCNConv, RSAGEConv
from gnnscale.nn.typed_models import (TYPED_MODELS, TypedInput, TypedModel, TypedModelConfig, sources_by_type,
                                      typed_input)

__all__ = ["BACKENDS", "KERNELS", "GAT", "GATConv", "GCN", "GCNConv", "GraphSAGE", "MODELS", "ModelConfig", "RGATConv",
           "RGCNConv", "RSAGEConv", "SAGEConv", "TYPED_MODELS", "TypedInput", "TypedModel", "TypedModelConfig",
           "aggregate_sum", "build_model", "sources_by_type", "typed_input"]
