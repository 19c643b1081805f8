"""Split parallelism (GSplit): splitting a mini-batch by owner (:mod:`.plan`, :mod:`.owner`) and the
cooperative layers' shuffles (:mod:`.shuffle`)."""
