"""The request path as named steps: authenticate, parse, resolve, admit, pick, forward, finish."""
