"""Running a job: the streaming runner, jobs as background processes, the retention check."""
