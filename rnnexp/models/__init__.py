"""What is measured: model factories (each returns a Workload for a WorkloadSpec), their
float64 references and work counts. Imports rnnexp.config and rnnexp.machine only; knows
nothing of tracking."""
