"""Run by torchrun in tests/train/test_fit.py: every worker trains, through ``gnnscale.train.fit``, the
models of ``fit_models`` (one of its own over blocks, PyG's GraphSAGE; built with other weights on every
rank but 0) in the hybrid and vanilla layouts, and gnnscale's built-in GraphSAGE in the hybrid layout,
one after the other; rank 0 writes every run's per-step losses as JSON.

    torchrun --nproc-per-node P tests/fit_script.py PARTITION_DIR OUT.json
"""

from __future__ import annotations

import json
import os
import sys

import torch

from fit_models import make_model
from gnnscale.nn import ModelConfig
from gnnscale.partition import read_manifest
from gnnscale.train import TrainConfig, fit
from gnnscale.train.inputs import seeded_model

CONFIG = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=2, lr=0.01, seed=3, threads=1, evaluate=False)


def main(partition_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    manifest = read_manifest(partition_dir)
    dims = (manifest["feature_dim"], manifest["num_classes"], len(CONFIG.fanouts))
    runs = {}
    for kind in ("blocks", "pyg"):
        for layout in ("hybrid", "vanilla"):
            model = make_model(kind, *dims)
            if os.environ["RANK"] != "0":
                with torch.no_grad():  # other weights than rank 0's: fit must start every worker from rank 0's
                    for p in model.parameters():
                        p.add_(1.0)
            report = fit(model, partition_dir, inputs=kind, config=CONFIG, layout=layout, progress=False,
                         timeout_s=60)
            runs[f"{kind}-{layout}"] = [h["iteration_losses"] for h in report.history]
    builtin = seeded_model(ModelConfig(name="sage", in_dim=dims[0], hidden_dim=16, num_classes=dims[1],
                                       num_layers=dims[2]), CONFIG.seed)
    report = fit(builtin, partition_dir, inputs="blocks", config=CONFIG, layout="hybrid", progress=False, timeout_s=60)
    runs["builtin-hybrid"] = [h["iteration_losses"] for h in report.history]
    if os.environ["RANK"] == "0":
        with open(out, "w") as f:
            json.dump(runs, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
