"""Leaf helpers that import nothing of the package.

- ``_process``: who is executing, and whether an executor on this machine is alive.
- ``_heartbeat``: one daemon thread that calls ``beat`` functions periodically.
- ``_plans``: the loop that drives an operation written once as a generator of its I/O.
"""
