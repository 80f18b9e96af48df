"""The notebook scenarios of the corpus, one module each: ``NOTEBOOK``, ``FAMILY``, ``TITLE``, ``ALIASES`` and ``plan(dev)``.

A scenario's ``plan`` writes its notebook as plain code through a
:class:`~tools.corpus.developer.Developer`; :mod:`tools.corpus.sessions` lists
them in ``SCENARIOS`` and gives each to three developers.
"""
