"""A real model server in the loop: vLLM's CPU build, serving a tiny model made here."""
