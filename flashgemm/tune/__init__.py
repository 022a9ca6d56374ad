"""Meta-Schedule tuning: the tuner, its databases of top-k records and their provenance, the categorical mutator, the
RPC runner and cluster, and the peer "Meta-Schedule's default schedules of the unfused op"."""
