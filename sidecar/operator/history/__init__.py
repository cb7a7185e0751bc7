"""The last minutes, cluster-wide, for the duty team's screen: per-second aggregates that
every sidecar adds to in Redis, and each sidecar's copy of the window for its page."""
