"""The demo: named scenarios, each a scripted session tree with real shell commands.

``python -m halo_actors demo`` plays them all (the tour); see ``docs/demo.md``.
Layout: :mod:`.tour` (the scenario list, the run), :mod:`.stage` (what a
scenario plays on), :mod:`.scenarios` (one module each), :mod:`.board`,
:mod:`.feed`, :mod:`.view` and :mod:`.live` (how a run is shown), and
:mod:`.crash_child` (the runtime process the crash scenario kills).
"""
