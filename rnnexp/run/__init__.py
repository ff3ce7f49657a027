"""Running jobs: worker processes and their stopping rules (schedule), the blocks of
configurations that share workers (blocks), interleaved windows (interleave), drift, the
roofline peaks, estimates, and signals. Imports the stages below it (config, machine,
models, backends, measure, results)."""
