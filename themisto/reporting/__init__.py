"""Stage 4, reporting: per-sample scores become figures with confidence intervals and paired tests.

In: lm-eval sample logs under one or more run folders (and the
``exec_samples_<task>.jsonl`` of ``themisto exec-score``). Out: a Markdown
report and a PNG plot; and the plain-text table of a ``themisto stability`` run.

- :mod:`~themisto.reporting.samples`: reading the sample logs and exec outcomes
- :mod:`~themisto.reporting.stats`: bootstrap CIs (examples or whole trajectories), paired
  permutation and McNemar tests, MDE
- :mod:`~themisto.reporting.analysis`: the figures of a report
- :mod:`~themisto.reporting.markdown`: the report as Markdown
- :mod:`~themisto.reporting.plot`: the report as a PNG
- :mod:`~themisto.reporting.stability_table`: the table of a ``themisto stability`` run
- :mod:`~themisto.reporting.resampling`: the resamples and seed of a report, declared once
- :mod:`~themisto.reporting.compact`: run folders with only what the report reads (``themisto compact``)
"""
