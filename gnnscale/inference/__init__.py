"""After training: layer-wise full-neighborhood inference, predictions and metrics."""
