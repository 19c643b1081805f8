"""Feature stores: what a layout gathers a batch's input rows from.

- :mod:`.local`: every row in this process (one process, a one-part partition);
- :mod:`.partitioned`: a worker's part of the rows, the rest fetched from their owners in 2 rounds;
- :mod:`.host_cache`: the partitioned store with the hottest remote rows cached in host memory
  (``--cache-fraction``);
- :mod:`.device_cache`: the hottest rows held on the device, in front of any store
  (``--gpu-cache-fraction``);
- :mod:`.dgs`: DGS's partitioned store that sends remote rows on chosen dimensions only;
- :mod:`.hot_set`: which rows a cache holds (highest in-degree, ties by lower id) and the one check of a
  cache's fraction.
"""
