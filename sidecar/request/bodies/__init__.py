"""Reading a request body for admission, one module an API: model, prompt, requested
output, stream; OpenAI's bodies checked as the API would; the prompt's tokens counted
(tokens.py). Every reader is pure and bounded (limits.py): what it cannot read is an
InvalidRequest, answered with a 400 in the route's own shape."""
