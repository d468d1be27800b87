"""The task layer under tasks.py: flags, settings and sessions, the task decorator, exit codes,
invoke's own input errors, and the cache, lock and sources tasks."""
