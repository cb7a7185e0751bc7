"""The request path. extproc takes Envoy's stream (the exchange's state machine) and
hands the whole request to the decider; admission's director (admission/director.py)
runs the stages in order, each one call into a module of its own:

    route, read and price   admission/pricing.py, with bodies/ (each API's reader) and
                            policy/ (the tier's guards, what the request costs)
    identify                admission/identity.py
    choose the pool         admission/overflow.py
    overload                admission/overload.py, reading what sidecar.loops keeps
    budget                  admission/budget.py, with limiter/ (the buckets in Redis)
    wait                    queueing/ (the budget line, the slot queue, the forecasts)
    answer                  admission/answer.py; a refusal: policy/responses.py, answers/

completion/ is the exchange's end (the slot given back, the reservation settled), fed by
Envoy's access log. No package here imports admission; the path reads the state the
background loops keep (sidecar.loops) and never imports the operator tools.
"""
