"""Checkpoints and model files of a run: the file format, written atomically with a checksum
(:mod:`~gnnscale.train.checkpoints.files`), what rank 0 saves and what a resumed run may change
(:mod:`~gnnscale.train.checkpoints.runs`), and the best-validation epoch's weights kept while training
(:mod:`~gnnscale.train.checkpoints.best`)."""
