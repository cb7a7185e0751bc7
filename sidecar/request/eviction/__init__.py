"""Ending running streams of the lowest tiers when a pool's GPUs need their memory for the
tiers above: which streams (streams.py) and how each ends (answers/stream_end.py)."""
