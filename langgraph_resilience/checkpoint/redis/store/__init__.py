"""How a thread is kept on Redis: ``_keys`` (the key schema: one hash tag per
thread), ``_scripts`` (the Lua that stores and reads a thread atomically),
``_records`` (a checkpoint or write in a hash field, with its checksum), ``_ops``
(every operation, written once for both twins), ``_driver`` (pipelines, retries,
script reloads), ``_durability`` (what the server keeps on disk), ``_tier``
(demotion to the cold tier and restore), ``_common`` (options, setup checks,
refusals) and ``_counts`` (the save counters, counted by the scripts of ``put``
and ``put_writes``; ``read_counters``).
"""
