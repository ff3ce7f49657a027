"""What a cluster's batch scheduler says about the job this process runs in.

Under SLURM a job learns its node, job and array ids and how often it was requeued from
variables SLURM sets in its environment; they go into every result (Environment.scheduler)
so that a comparison can tell which node measured what (rnnexp.analysis.nodes) and a person
can find the task's log. Empty outside a scheduler's job.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

# Result field → SLURM's variable (sbatch(1), "OUTPUT ENVIRONMENT VARIABLES").
SLURM_VARIABLES = {
    "node": "SLURMD_NODENAME",
    "job_id": "SLURM_JOB_ID",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
    "restarts": "SLURM_RESTART_COUNT",
    "partition": "SLURM_JOB_PARTITION",
    "cluster": "SLURM_CLUSTER_NAME",
}


def slurm_job(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The SLURM job this process runs in ({} outside one): node, ids, restarts, partition."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return {}
    found = {"scheduler": "slurm"}
    found.update({key: env[var] for key, var in SLURM_VARIABLES.items() if env.get(var)})
    return found


def task_name(job: Mapping[str, str]) -> str:
    """How SLURM names the job: `<array job>_<task>` for an array task, else its id."""
    if job.get("array_job_id") and job.get("array_task_id"):
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return job.get("job_id", "")
