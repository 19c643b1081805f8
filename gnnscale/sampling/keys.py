"""The draw ranges of DGS node sampling; the counter-based keys themselves are :mod:`gnnscale.keys`.

DGS node sampling (gnnscale.sampling.dgs) draws from the plain sampler's stream of each (key, hop,
destination) in disjoint ranges of draw indices: the local choice takes draws [0, k_local) as the
plain sampler does; the quota's stochastic rounding, the rejection tries and the exact inversion
draws start at these.
"""

from __future__ import annotations

DGS_QUOTA_DRAW = 1 << 40
DGS_TRY_DRAW = 2 << 40
DGS_EXACT_DRAW = 3 << 40
