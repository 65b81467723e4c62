"""Prefix routing: the prompt's prefix key and chunk chain, the pick over the shared prefix index and
the prefix-affinity policy."""
