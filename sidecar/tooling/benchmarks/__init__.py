"""`qos-sidecar bench`: scenarios run against the real stack."""
