"""The request path. extproc takes Envoy's stream (the exchange's state machine) and
hands the whole request to the decider; admission's director (admission/director.py)
runs the stages in order, each one call into a module of its own:

    route and read          admission/reading.py, with bodies/ (each API's reader)
    identify                admission/identity.py
    price                   admission/pricing.py, with counting/ (the prompt's tokens),
                            policy/ (the tier's guards, what the request costs)
    candidates              admission/candidates.py: its pool, those it overflows to,
                            less those shedding it for what sidecar.loops keeps
    budget                  admission/budget.py, with limiter/ (the buckets in Redis)
    wait                    queueing/, entered through waiting.py (how long it may wait,
                            the budget line, the slot queue, the forecasts)
    answer                  admission/answer.py; a refusal: answers/refusal.py

completion/ is the exchange's end (the slot given back, the reservation settled), fed by
Envoy's access log. No package here imports admission; the path reads the state the
background loops keep (sidecar.loops) and never imports the operator tools.
"""
