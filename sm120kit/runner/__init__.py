"""Running host ops: connections (SSH or local), the per-host context, the thread pool with
its results, the run's shared state and flags, the controller's identity and interrupts."""
