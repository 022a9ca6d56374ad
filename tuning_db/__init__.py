"""Stage 3: Meta-Schedule tuning and the committed top-k databases (tuning_db/<target>/<workload>/)."""
