"""The matrix samplers' distributed layouts (Tripathy et al.): the 1.5D process grid (:mod:`.grid15d`)."""
