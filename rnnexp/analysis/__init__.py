"""Reading results back: significance, sweeps from folders or MLflow, comparisons and
their charts, the HTML report (report/), a measurement's history and the noisy bisection.
Imports results and run (the roofline), never app."""
