"""One configuration in one process: its workload and work counts, verification
against the float64 reference, the timer, the plan (job) and the isolated worker
process. Imports rnnexp.config, rnnexp.machine, rnnexp.models, rnnexp.backends."""
