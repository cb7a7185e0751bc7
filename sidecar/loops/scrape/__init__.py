"""Scrape mode: one sidecar per group of targets reads the pods' /metrics itself, so model
pods need no reporter container (`serve --scrape-targets`)."""
