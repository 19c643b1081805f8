"""Explanation-guided sampling (DGS): the samplers and feature store with masks (:mod:`.sampling`), the
explanation graph (:mod:`.explanation`) and the online explainer (:mod:`.explainer`)."""
