"""The smoke check's controller side: the probe's arguments, its verdicts and table rows, and
remembered verdicts."""
