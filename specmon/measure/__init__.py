"""``specmon measure``: the same prompts through a server without speculation and its twin
with it - tokens per second, acceptance, and byte-for-byte proof the answers did not change.

Pure (no I/O): :mod:`~specmon.measure.prompts` (workloads), :mod:`~specmon.measure.stats`,
:mod:`~specmon.measure.compare` (byte-for-byte comparison), :mod:`~specmon.measure.breakeven`
(the implied draft cost), :mod:`~specmon.measure.endpoints` (URLs and response parsing),
:mod:`~specmon.measure.analysis` (raw run -> the table), :mod:`~specmon.measure.render` (text)
and :func:`~specmon.measure.labbook.labbook_records`.

I/O: :mod:`~specmon.measure.client` (HTTP, one aiohttp session) and
:mod:`~specmon.measure.runner` (runs the workloads level by level).
"""
