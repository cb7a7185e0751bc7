"""An exchange's end, from Envoy's access log: the slot given back, the reservation
settled against the answer's usage, the latency sampled for the SLO controller."""
