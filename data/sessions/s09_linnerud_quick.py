"""A short look at the linnerud data (exercise vs. physiological measurements): two frames joined, correlations, a linear fit.

Small on purpose: the corpus test regenerates this session and compares it
with the committed CSV byte for byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_09"
NOTEBOOK = "linnerud.ipynb"
START = "2025-03-13T17:10:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import pandas as pd\nfrom sklearn.datasets import load_linnerud")
    nb.run(imports)
    load = nb.add("lin = load_linnerud(as_frame=True)\nlin.data.head(3)")
    nb.run(load)
    targets = nb.add("lin.target.describe().loc[['mean', 'std']]")
    nb.run(targets)
    both = nb.add("both = lin.data.join(lin.targets)")
    nb.run(both)
    nb.fix(both, "lin.targets)", "lin.target)\nboth.shape")
    nb.run(both)
    corr = nb.add("both.corr().loc[lin.data.columns, lin.target.columns].round(2)")
    nb.run(corr)
    fit = nb.add(
        "from sklearn.linear_model import LinearRegression\n"
        "model = LinearRegression().fit(lin.data, lin.target['Weight'])\n"
        "dict(zip(lin.data.columns, model.coef_.round(3)))"
    )
    nb.run(fit)
    print_cell = nb.add("print(f'R^2 = {model.score(lin.data, lin.target[\"Weight\"]):.3f}')")
    nb.run(print_cell)
    nb.save()
    nb.restart()
    nb.run(corr)
    nb.run_all()
    nb.save()
