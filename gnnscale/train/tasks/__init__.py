"""Tasks: what is learned (node classification, link prediction), apart from where data lives (the layouts).

:mod:`~gnnscale.train.tasks.base` holds the task protocol and spec; one module per task implements it
(:mod:`~gnnscale.train.tasks.node`, :mod:`~gnnscale.train.tasks.link` with its settings and supervision
edges); :mod:`~gnnscale.train.tasks.registry` knows them all by name.
"""
