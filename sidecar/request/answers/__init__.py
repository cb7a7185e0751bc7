"""The gateway's own answers, in the shape of the API the client called: a fallback
that carries the tier's text where the API has a place for it, else an error object."""
