"""Everything people see, in one place; the library computes, this package prints.

- `console`: consoles, the one JSON document on stdout, the one-line error, host-less documents.
- `progress`: live per-host progress while a run works (a table, or plain lines in logs).
- `report`: a run's results: the recap, facts, recipes, plan/provision steps, builds, keys,
  the inventory and the ``--explain`` table.
- `checks`: smoke verdicts and serve-check evidence.
- `listings`: host-less documents: the recipe catalog, the wheel cache and the source store.

Nothing here decides anything: each function gets a result or a document and draws it.
"""
