"""Waiting for admission, one entry (waiting.py): the line for a tier's bucket and the
cutoff of a contended one, the admission queue (its release order, the slots, the
peers' counts), the forecasts of a wait, and the queue's metrics."""
