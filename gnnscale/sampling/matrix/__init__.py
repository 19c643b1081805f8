"""Matrix bulk sampling (Tripathy, Yelick, Buluç): GraphSAGE and LADIES as sparse products over a
stack of mini-batches. See docs/matrix_sampling.md."""

from gnnscale.sampling.matrix.ladies import LadiesSampler, check_layer_sizes, layer_probabilities
from gnnscale.sampling.matrix.sage import MatrixSampler, check_bulk

__all__ = ["LadiesSampler", "MatrixSampler", "check_bulk", "check_layer_sizes", "layer_probabilities"]
