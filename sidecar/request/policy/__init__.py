"""A decision's rules and values, pure: what is decided (decision.py), the tags an
admission carries, what a request costs, the tier's guards, what the engine schedules
by, and the one place a refusal becomes an answer (responses.py)."""
