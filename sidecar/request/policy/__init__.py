"""A decision's rules and values, pure: what is decided (decision.py), the tags an
admission carries, what a request costs, the tier's guards, what the engine and the
endpoint picker schedule it by (scheduling.py)."""
