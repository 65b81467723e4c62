"""Step 6, forward: the HTTP/1.1 connection pool to the replicas and one exchange with a replica."""
