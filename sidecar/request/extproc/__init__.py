"""Envoy's external-processing stream: the gRPC servicer, the exchange's state machine,
its messages, and what each decision adds to the metrics."""
