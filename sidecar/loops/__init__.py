"""The background loops: what they keep is what the request path reads.

overload (the pods' load, shedding, the projection of admissions), scrape and dialects
(reading model servers' metrics), slo (latency samples and the controller), fairness
(the tiers' fair shares, for metrics). They build on the shared modules (config, the
budgets' Redis layout, refusals) and never import the request path.
"""
