"""Reading results back: significance, sweeps from folders or MLflow, comparisons and
their charts. Imports results and run (the roofline), never app."""
