"""Reading a request body for admission, one module an API: model, prompt, requested
output, stream. Every reader is pure and bounded (sidecar/request/bodies/limits.py): what it
cannot read is an InvalidRequest, answered with a 400 in the route's own shape."""
