"""The saver methods both dialects share, and the typed parts reached from a saver.

- ``_base``: the state the copies of a saver share, what rides along with a write.
- ``_savers`` / ``_asavers``: the mixins of the sync and async savers.
- ``_parts``: the base of the typed parts (sync I/O, or bridged to an event loop).
- ``_interfaces``: ``saver.effects``, ``saver.attempts``, ``saver.runs``.
- ``_threads``: checkpoints, writes, the fork check, copying and deleting threads.
- ``_retention``: pruning finished runs' records and old checkpoint history.
- ``_route_text``: a failed node's route as its stored error carries it.
"""
