"""Running jobs: worker processes and their stopping rules (schedule), interleaved
windows, drift, the roofline peaks, estimates, and signals. Imports the stages below
it (config, machine, models, backends, measure, results)."""
