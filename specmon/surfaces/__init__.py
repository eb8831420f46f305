"""The surfaces a person reads: the daemon's immutable views (specmon.daemon.views) rendered
as the status page ``/`` (:mod:`.status`), one target's page ``/target/NAME`` (:mod:`.target`),
the JSON API ``/api/v1/targets`` (:mod:`.api`), and the parts they share: the configuration
epochs and changes (:mod:`.epochs`) and the per-class figures (:mod:`.classes`).

Pure rendering: no I/O, no state, no figure of their own. Each figure comes from the view,
and every verdict-side figure from its window's answer (specmon.answer). The daemon's app
(specmon.daemon.app) serves them; tests/test_layers.py keeps them below it and above the
daemon's state.
"""
