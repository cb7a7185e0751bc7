"""The request path, in the order a request crosses it.

extproc (Envoy's stream) → the route table (what the request is: sidecar/routes,
resolved with the configuration) → admission (identity, the decider) → bodies (reading
it) → policy (guards, cost, how a refusal is answered) → limiter (its budgets, in
Redis) → queueing (a slot, or a wait) → answers (the gateway's own answers in each
API's shape) → completion (the exchange's end: the slot, the settlement).

It reads the state the background loops keep (sidecar.loops) and never imports the
operator tools (sidecar.operator).
"""
