"""Model factories: each returns a Workload for a WorkloadSpec. They know nothing of tracking."""
