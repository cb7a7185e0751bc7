"""Token buckets: what a limiter is asked and answers, its Redis implementation (one Lua
script a call), the over-limit cache, the local budgets that outlive a lost Redis, and
what a refusal by the buckets tells the client."""
