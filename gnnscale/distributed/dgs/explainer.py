"""Online explanation for DGS (Wan et al., section III-C, Algorithm 1): a GNNExplainer-style
optimisation (Ying et al. 2019) of a node mask over the remote super-nodes and a feature mask over the
dimensions, on a copy of the current model, in a background thread.

The optimisation is our own few dozen lines rather than PyG's ``torch_geometric.explain``: PyG's
``GNNExplainer`` learns one node mask tensor (per node, per feature, or shared over features: not a
mask per super-node *and* a feature mask at once), its edge masks reach the model only through PyG's
``MessagePassing`` layers, which gnnscale's Block layers are not, and it has no notion of one mask
entry shared by the members of a super-node. Wrapping the model to fit would take more code than the
optimisation itself.

Loss, on the explanation graph (:mod:`gnnscale.distributed.dgs.explanation`) of ``P`` probes, with the
model frozen::

    x'_u = b + (x_u - b) * sigmoid(m_f) * (1 for the part's own nodes | sigmoid(m_n[super(u)]) for remote ones)
    L    = sum over probes v of CE(model(x')[v], argmax model(x)[v])
           + 0.005 * sum sigmoid(m_n) + 1.0 * mean H(sigmoid(m_n))
           + P * (1.0 * mean sigmoid(m_f) + 0.1 * mean H(sigmoid(m_f)))

Each probe is one GNNExplainer objective (Ying et al.; the penalties are PyG's defaults on its object
and feature masks), and the probes share both masks: every probe's prediction reads every dimension,
so the feature mask's penalties count once per probe, while a super-node reaches a few probes, so the
node mask's count once. The choices, each measured on the ``hard`` synthetic graph (4 METIS parts,
part 0, GraphSAGE after 60 iterations; the generator knows which 50 of the 100 dimensions carry class
signal, and the model's own first-layer weights rank all 15 lowest dimensions uninformative):

* the prediction term is summed over the probes: averaged (PyG's reduction), the node penalties
  dominate and Adam moves every node-mask entry alike (0.21-0.28, std 0.013 after 100 steps at lr
  0.01); summed, the entries separate (0.05-0.95);
* the feature penalties scaled by ``P``: counted once, they vanish beside the summed prediction term
  and Adam, blind to gradient size, moves informative and noise dimensions alike (mean mask 0.87 and
  0.77; 3 of the 15 lowest-ranked dimensions informative); per probe, 0.73 and 0.15, 1 of 15 (64
  probes; chance would be 7.5);
* a masked value moves to the mean feature vector ``b`` (an "average node"), not to 0;
* 10 Adam steps at lr 0.3 instead of PyG's 100 at 0.01: the same ranking as 30 steps at 0.1 (1 and
  2 of 15) at a third of the cost, 81 ms of CPU for 64 probes against 37 ms per training iteration
  of batch 512, i.e. 7% of the 30 iterations a refresh runs beside (128 probes: 2 of 15, 11%).

A thread rather than a process: a refresh is a few hundred small tensor operations on a graph of a
few thousand rows; a process would add a model copy per refresh through IPC, a start-up of seconds
and failure modes of its own, and on a CPU-only worker it competes for the same cores.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.distributed.dgs.explanation import ExplanationGraph
from gnnscale.keys import STREAM_EXPLAIN, derive_key

_INIT_STD = 0.1  # masks start near sigmoid(0) = 0.5 (PyG's GNNExplainer initialises likewise)
_KEEP_RESULTS = 4  # finished masks kept for wait(iteration)


class ExplanationError(RuntimeError):
    """The explanation failed (the model diverged, a bug); sampling must not go on with these masks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainConfig:
    """The optimisation of one refresh.

    Args:
        epochs: Adam steps, >= 1 (5; PyG's GNNExplainer: 100).
        lr: Adam's step size, > 0 (0.6; PyG: 0.01). Half the steps at twice the step size of the 10 at 0.3
            used before: the same reach for the logits (Adam's early steps move each by about lr) at half
            the CPU, half of which is per step whatever the graph's size (docs/dgs.md).
        node_size, node_entropy: penalties on the node mask: sum of its values, mean entropy (0.005, 1.0).
        feature_size, feature_entropy: penalties on the feature mask, per probe: mean, mean entropy (1.0, 0.1).
        loss_threshold: stop once the loss is at most this (DGS Algorithm 1, line 19); None: run every epoch.
        seed: root of the masks' random initialisation (with the iteration: deterministic).
    """

    epochs: int = 5
    lr: float = 0.6
    node_size: float = 0.005
    node_entropy: float = 1.0
    feature_size: float = 1.0
    feature_entropy: float = 0.1
    loss_threshold: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs: expected an int >= 1, got {self.epochs!r}")
        if not self.lr > 0:
            raise ValueError(f"lr: expected > 0, got {self.lr!r}")
        for name in ("node_size", "node_entropy", "feature_size", "feature_entropy"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Masks:
    """The result of one explanation.

    Args:
        part: the worker whose explanation graph was explained.
        iteration: the training iteration whose model was explained (staleness = now - iteration).
        fingerprint: the explanation graph's (:meth:`ClusterMap.graph_fingerprint`).
        cluster_weight: float64 [num_clusters], > 0: the node mask per super-node; clusters outside the
            explanation graph (no edge into the part, and the part's own) get the mean of the others.
        feature_importance: float32 [feature_dim] in (0, 1): the feature mask.
        loss: the final explanation loss.
        epochs: optimisation steps run.
        seconds: wall time of the explanation; cpu_seconds: its thread's CPU time.
    """

    part: int
    iteration: int
    fingerprint: str
    cluster_weight: np.ndarray
    feature_importance: np.ndarray
    loss: float
    epochs: int
    seconds: float
    cpu_seconds: float

    @property
    def feature_dim(self) -> int:
        return int(self.feature_importance.shape[0])

    def top_dims(self, rate: float) -> np.ndarray:
        """int64, sorted: the ``round(rate * d)`` (at least 1) most important dimensions; ties go to the
        lower index. ``rate`` in (0, 1] is DGS's N_f (``--dgs-feature-rate``)."""
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
            raise ValueError(f"rate: expected a number in (0, 1] (--dgs-feature-rate), got {rate!r}")
        d = self.feature_dim
        keep = max(1, min(d, int(math.floor(rate * d + 0.5))))
        order = np.lexsort((np.arange(d), -self.feature_importance.astype(np.float64)))
        return np.sort(order[:keep]).astype(np.int64)


def check_masks(masks: Masks, fingerprint: str, part: int, num_clusters: int, feature_dim: int) -> None:
    """Raise ValueError unless ``masks`` were computed on part ``part``'s explanation graph ``fingerprint``."""
    if not isinstance(masks, Masks):
        raise TypeError(f"masks: expected Masks (from OnlineExplainer), got {type(masks).__name__}")
    if masks.fingerprint != fingerprint or masks.part != part:
        raise ValueError(f"masks: computed on explanation graph {masks.fingerprint} (part {masks.part}), but this "
                         f"worker's is {fingerprint} (part {part}): masks of another worker, partition or clustering")
    if masks.cluster_weight.shape != (num_clusters,) or masks.feature_importance.shape != (feature_dim,):
        raise ValueError(f"masks: expected {num_clusters} cluster weights and {feature_dim} feature importances, "
                         f"got {masks.cluster_weight.shape} and {masks.feature_importance.shape}")


def _entropy(m: Tensor) -> Tensor:
    eps = 1e-15
    return -(m * (m + eps).log() + (1 - m) * (1 - m + eps).log())


@numba.njit(cache=True, nogil=True, fastmath=True)
def _scale_rows(centered, baseline, feature_mask, row_mask):
    """``baseline + centered * feature_mask * row_mask[:, None]``, row by row."""
    n, d = centered.shape
    out = np.empty((n, d), dtype=np.float32)
    for i in range(n):
        r = row_mask[i]
        for j in range(d):
            out[i, j] = baseline[j] + centered[i, j] * (feature_mask[j] * r)
    return out


_GRAD_BLOCK_ROWS = 256  # rows summed in float32 before the feature gradient's float64 total


@numba.njit(cache=True, nogil=True, fastmath=True)
def _scale_rows_grads(grad, centered, feature_mask, row_mask):
    """The two masks' gradients of :func:`_scale_rows` from the output's: with ``h = grad * centered``,
    ``h^T row_mask`` and ``h feature_mask``, in one pass and without storing ``h``."""
    n, d = centered.shape
    total = np.zeros(d, dtype=np.float64)
    block = np.zeros(d, dtype=np.float32)
    grad_row = np.empty(n, dtype=np.float32)
    for i in range(n):
        r = row_mask[i]
        acc = np.float32(0.0)
        for j in range(d):
            h = grad[i, j] * centered[i, j]
            block[j] += r * h
            acc += h * feature_mask[j]
        grad_row[i] = acc
        if (i + 1) % _GRAD_BLOCK_ROWS == 0 or i == n - 1:
            for j in range(d):
                total[j] += block[j]
                block[j] = 0.0
    return total.astype(np.float32), grad_row


class _ScaleRows(torch.autograd.Function):
    """:func:`_scale_rows` with gradients for the two masks only.

    Autograd on the plain torch expression stores two [rows, d] products and reduces each broadcast mask
    in passes of its own: on the products-shaped graph (51,449 rows of 100 dimensions, 64 probes) those
    passes took over half of an explanation's CPU (0.65 of 1.2 s). Here each direction is one pass."""

    @staticmethod
    def forward(ctx, centered: Tensor, baseline: Tensor, feature_mask: Tensor, row_mask: Tensor) -> Tensor:
        feature_mask, row_mask = feature_mask.detach().contiguous(), row_mask.detach().contiguous()
        ctx.save_for_backward(centered, feature_mask, row_mask)
        return torch.from_numpy(_scale_rows(centered.numpy(), baseline.numpy(), feature_mask.numpy(),
                                            row_mask.numpy()))

    @staticmethod
    def backward(ctx, grad: Tensor):
        centered, feature_mask, row_mask = ctx.saved_tensors
        grad_feature, grad_row = _scale_rows_grads(grad.contiguous().numpy(), centered.numpy(),
                                                   feature_mask.numpy(), row_mask.numpy())
        return None, None, torch.from_numpy(grad_feature), torch.from_numpy(grad_row)


def masked_input(graph: ExplanationGraph, node_mask: Tensor, feature_mask: Tensor,
                 centered: Tensor | None = None) -> Tensor:
    """float32 [num_rows, d]: every input row moved towards the mean node by the feature mask, per
    dimension, and a remote row also by its super-node's mask. ``centered``: ``graph.x - graph.baseline``
    if the caller computed it once for many calls."""
    row_mask = torch.ones(graph.x.shape[0], dtype=node_mask.dtype)
    remote = graph.super_of_row >= 0
    row_mask = row_mask.masked_scatter(remote, node_mask[graph.super_of_row[remote]])
    if centered is None:
        centered = (graph.x - graph.baseline).contiguous()
    return _ScaleRows.apply(centered, graph.baseline, feature_mask, row_mask)


def explain(model: nn.Module, graph: ExplanationGraph, config: ExplainConfig, iteration: int) -> Masks:
    """Optimise the node and feature masks for ``model`` on ``graph``. The model is used in eval mode
    (restored afterwards) and left unchanged: gradients flow to the masks only."""
    start, cpu_start = time.perf_counter(), time.thread_time()
    was_training = model.training
    model.eval()
    try:
        node_logit, feat_logit, value, epochs = _optimise(model, graph, config, iteration)
    finally:
        model.train(was_training)
    node_mask = node_logit.sigmoid().double().numpy()
    weight = np.full(graph.num_clusters, node_mask.mean() if node_mask.size else 0.5)
    weight[graph.super_cluster] = node_mask
    return Masks(part=graph.part, iteration=iteration, fingerprint=graph.fingerprint,
                 cluster_weight=np.maximum(weight, 1e-6), feature_importance=feat_logit.sigmoid().numpy(),
                 loss=value, epochs=epochs, seconds=time.perf_counter() - start,
                 cpu_seconds=time.thread_time() - cpu_start)


def _optimise(model: nn.Module, graph: ExplanationGraph, config: ExplainConfig,
              iteration: int) -> tuple[Tensor, Tensor, float, int]:
    """The mask logits after the optimisation, the last loss and the steps run."""
    with torch.no_grad():
        target = model(graph.blocks, graph.x).argmax(1)
    gen = torch.Generator().manual_seed(derive_key(config.seed, iteration, 0, graph.part, STREAM_EXPLAIN))
    node_logit = (torch.randn(graph.num_super, generator=gen) * _INIT_STD).requires_grad_()
    feat_logit = (torch.randn(graph.feature_dim, generator=gen) * _INIT_STD).requires_grad_()
    optimizer = torch.optim.Adam([node_logit, feat_logit], lr=config.lr)
    centered = (graph.x - graph.baseline).contiguous()  # once: every step masks the same rows
    epochs, value = 0, float("nan")
    with torch.enable_grad():
        for epochs in range(1, config.epochs + 1):
            m_n, m_f = node_logit.sigmoid(), feat_logit.sigmoid()
            # Summed over the probes: each is one GNNExplainer objective, sharing the masks.
            logits = model(graph.blocks, masked_input(graph, m_n, m_f, centered))
            loss = F.cross_entropy(logits, target, reduction="sum")
            # Every probe reads every dimension: the feature mask's penalties count once per probe.
            loss = loss + graph.num_probes * (config.feature_size * m_f.mean()
                                              + config.feature_entropy * _entropy(m_f).mean())
            if graph.num_super:
                loss = loss + config.node_size * m_n.sum() + config.node_entropy * _entropy(m_n).mean()
            value = float(loss.detach())  # host sync: the finiteness check and the early stop need it
            if not math.isfinite(value):
                raise ExplanationError(f"explanation of iteration {iteration}: the loss became {value} at epoch "
                                       f"{epochs} (does the model produce finite outputs?)")
            optimizer.zero_grad(set_to_none=True)
            loss.backward(inputs=[node_logit, feat_logit])  # the model's own gradients stay untouched
            optimizer.step()
            if config.loss_threshold is not None and value <= config.loss_threshold:
                break
    return node_logit.detach(), feat_logit.detach(), value, epochs


class OnlineExplainer:
    """Explains snapshots of the training model in a background thread, off the training loop.

    ``submit`` hands over a snapshot and returns at once; ``latest`` is the newest finished masks;
    ``wait`` blocks for the masks of one submitted iteration (for runs that must not depend on timing).
    Submissions are explained in order, none dropped: the trainer's schedule needs every one of them
    (the refresh at iteration ``t`` reads the snapshot of ``t - T``), and dropping a waiting one when a
    newer arrived failed a run whose explanations took longer than ``T`` iterations (at ``T = 1`` about one
    run in seven). The queue stays short: the loading stage waits for each snapshot it needs, so training
    cannot run far ahead of the explainer.
    A failed explanation is never replaced by silence: every later call raises :class:`ExplanationError`.

    Args:
        graph: this worker's explanation graph.
        model_factory: builds a model of the training model's architecture (its weights are replaced by
            each snapshot); called once, here.
        config: the optimisation.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, graph: ExplanationGraph, model_factory: Callable[[], nn.Module],
                 config: ExplainConfig | None = None) -> None:
        if not isinstance(graph, ExplanationGraph):
            raise TypeError(f"graph: expected an ExplanationGraph, got {type(graph).__name__}")
        model = model_factory()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model_factory: expected it to return a torch.nn.Module, got {type(model).__name__}")
        self.graph, self.config = graph, config if config is not None else ExplainConfig()
        # This copy is only explained, never trained: without gradients for its weights, autograd records
        # only the masks' path through it.
        self._model = model.requires_grad_(False)
        self._shapes = {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}
        self._cond = threading.Condition()
        self._pending: deque[tuple[int, dict[str, Tensor]]] = deque()
        self._results: dict[int, Masks] = {}
        self._latest: Masks | None = None
        self._error: ExplanationError | None = None
        self._last_submitted = -1
        self._running: int | None = None
        self._closed = False
        self.busy_seconds = 0.0  # wall seconds of the finished explanations
        self.busy_cpu_seconds = 0.0  # and the explainer thread's CPU seconds in them
        # numba's thread count is per thread: the explainer's kernels (the model's aggregation) run with
        # the creator's (the run's --threads), not numba's default of every core. With the default, 4
        # workers on 2 cores took 1.23-1.25 s for an epoch with an explanation against 0.71-0.74 s without
        # (the whole hard preset, 10 iterations per epoch); with the creator's, 0.79-0.82 s.
        self._numba_threads = numba.get_num_threads()
        self._thread = threading.Thread(target=self._run, name=f"dgs-explainer-part{graph.part}", daemon=True)
        self._thread.start()

    # -- the training side ---------------------------------------------------------------------------

    def submit(self, model_state: Mapping[str, Tensor], iteration: int) -> None:
        """Queue an explanation of ``model_state`` (copied here: training goes on updating the weights)
        taken after ``iteration`` iterations. Non-blocking. Iterations must increase."""
        if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration <= self._last_submitted:
            raise ValueError(f"iteration: expected an int > the last submitted ({self._last_submitted}), got "
                             f"{iteration!r}")
        self._check_state(model_state)
        snapshot = {k: v.detach().to("cpu", copy=True) for k, v in model_state.items()}
        with self._cond:
            self._raise_if_failed()
            if self._closed:
                raise RuntimeError("submit: the explainer is closed")
            self._pending.append((iteration, snapshot))
            self._last_submitted = iteration
            self._cond.notify_all()

    def latest(self) -> Masks | None:
        """The newest finished masks (None before the first); raises if an explanation failed."""
        with self._cond:
            self._raise_if_failed()
            return self._latest

    def wait(self, iteration: int, timeout_s: float) -> Masks:
        """The masks of the snapshot submitted at ``iteration``, waiting up to ``timeout_s`` seconds."""
        with self._cond:
            self._raise_if_failed()
            queued = any(it == iteration for it, _ in self._pending)
            if not (queued or self._running == iteration or iteration in self._results):
                raise ValueError(f"iteration: no explanation of iteration {iteration} is pending, running or kept "
                                 f"(last submitted: {self._last_submitted})")
            done = self._cond.wait_for(lambda: iteration in self._results or self._error is not None, timeout_s)
            self._raise_if_failed()
            if not done:
                raise TimeoutError(f"wait: the explanation of iteration {iteration} took longer than {timeout_s} s")
            return self._results[iteration]

    def close(self) -> None:
        """Stop the thread after the running explanation (pending ones are dropped)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def __enter__(self) -> "OnlineExplainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        numba.set_num_threads(self._numba_threads)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if self._closed:
                    return
                iteration, state = self._pending.popleft()
                self._running = iteration
            try:
                self._model.load_state_dict(state)
                masks = explain(self._model, self.graph, self.config, iteration)
            except Exception as exc:  # surfaced to the training side by every later call
                error = exc if isinstance(exc, ExplanationError) else ExplanationError(
                    f"explanation of iteration {iteration} failed: {type(exc).__name__}: {exc}")
                if error is not exc:
                    error.__cause__ = exc
                with self._cond:
                    self._error, self._running = error, None
                    self._cond.notify_all()
                return
            with self._cond:
                self._results[iteration] = masks
                for old in sorted(self._results)[:-_KEEP_RESULTS]:
                    del self._results[old]
                self._latest, self._running = masks, None
                self.busy_seconds += masks.seconds
                self.busy_cpu_seconds += masks.cpu_seconds
                self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _check_state(self, state: Mapping[str, Tensor]) -> None:
        if not isinstance(state, Mapping):
            raise TypeError(f"model_state: expected a state_dict (a mapping), got {type(state).__name__}")
        if set(state) != set(self._shapes):
            missing, extra = sorted(set(self._shapes) - set(state)), sorted(set(state) - set(self._shapes))
            raise ValueError(f"model_state: does not match the explainer's model (missing {missing[:3]}, "
                             f"unexpected {extra[:3]})")
        for k, (shape, dtype) in self._shapes.items():
            v = state[k]
            if not isinstance(v, Tensor) or tuple(v.shape) != shape or v.dtype != dtype:
                got = f"{tuple(v.shape)} {v.dtype}" if isinstance(v, Tensor) else type(v).__name__
                raise ValueError(f"model_state: {k} expected {shape} {dtype}, got {got}")
