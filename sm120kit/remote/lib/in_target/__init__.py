"""Scripts the extension probe runs inside the target interpreter (``python -c``).

They are not modules to import: `sm120kit.remote.lib.targets.target_source` reads their text
(through the import system, so the hosts' bundle carries them) and runs each after
``prelude.py`` in the env's python, which may be another Python than the probe's.
"""
