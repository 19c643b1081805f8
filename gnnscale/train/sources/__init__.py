"""Where a run's data lives and how its workers join (the :class:`~gnnscale.train.setup.RunSource` of the one
setup path): a dataset trained in this process (:mod:`~gnnscale.train.sources.in_process`) or a partition
directory with one worker per part under torchrun (:mod:`~gnnscale.train.sources.partitioned`)."""
