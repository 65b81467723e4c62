"""Step 1, authenticate: an API key to a tenant with its allowed models, priority and limits."""
