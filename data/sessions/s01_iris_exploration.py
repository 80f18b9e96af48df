"""Exploration of the iris data: head, describe, value_counts, groupby, a few quick plots.

The user starts in Untitled.ipynb, renames it, re-runs cells while tweaking
them, hits a KeyError on a misspelt column, restarts and runs everything again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_01"
NOTEBOOK = "Untitled.ipynb"
START = "2025-03-03T09:12:00+00:00"


def script(nb: Notebook) -> None:
    title = nb.add("# Iris: first look", cell_type="markdown")
    nb.run(title)
    imports = nb.add("import pandas as pd\nimport numpy as np\nfrom sklearn.datasets import load_iris")
    nb.run(imports)
    load = nb.add("iris = load_iris(as_frame=True)\ndf = iris.frame\ndf.head()")
    nb.run(load)
    nb.rename("iris_exploration.ipynb")
    shape = nb.add("df.shape")
    nb.run(shape)
    cols = nb.add("df.columns")
    nb.run(cols)
    nb.fix(cols, "df.columns", "df.columns.tolist()")
    nb.run(cols)
    names = nb.add("df['species'] = df['target'].map(dict(enumerate(iris.target_names)))\ndf.sample(5, random_state=0)")
    nb.run(names)
    describe = nb.add("df.describe()")
    nb.run(describe)
    nb.fix(describe, "df.describe()", "df.describe().round(2)")
    nb.run(describe)
    counts = nb.add("df['Species'].value_counts()")
    nb.run(counts)
    nb.fix(counts, "'Species'", "'species'")
    nb.run(counts)
    nb.save()
    dtypes = nb.add("df.dtypes")
    nb.run(dtypes)
    info = nb.add("df.info()")
    nb.run(info)
    group = nb.add("df.groupby('species').mean()")
    nb.run(group)
    nb.fix(group, "df.groupby('species').mean()", "df.drop(columns='target').groupby('species').mean()")
    nb.run(group)
    nb.fix(group, ".mean()", ".agg(['mean', 'std']).round(2)")
    nb.run(group)
    ratio = nb.add(
        "df['petal_ratio'] = df['petal length (cm)'] / df['petal width (cm)']\n"
        "df['petal_ratio'].describe()"
    )
    nb.run(ratio)
    nb.run(shape)
    top = nb.add("df.nlargest(5, 'petal_ratio')[['species', 'petal_ratio']]")
    nb.run(top)
    print_summary = nb.add(
        "for name, part in df.groupby('species'):\n"
        "    print(f\"{name:>10}: n={len(part)}, mean sepal length={part['sepal length (cm)'].mean():.2f}\")"
    )
    nb.run(print_summary)
    corr = nb.add("df.drop(columns=['species']).corr().round(3)")
    nb.run(corr)
    nb.fix(corr, "columns=['species']", "columns=['species', 'target']")
    nb.run(corr)
    hist = nb.add("import matplotlib.pyplot as plt\ndf['sepal length (cm)'].hist(bins=20)")
    nb.run(hist)
    nb.fix(hist, "df['sepal length (cm)'].hist(bins=20)", "df['sepal length (cm)'].hist(bins=20)\nplt.title('Sepal length')\nplt.show()")
    nb.run(hist)
    scatter = nb.add(
        "fig, ax = plt.subplots(figsize=(5, 4))\n"
        "for name, part in df.groupby('species'):\n"
        "    ax.scatter(part['petal length (cm)'], part['petal width (cm)'], label=name, s=12)\n"
        "ax.legend()\nplt.show()"
    )
    nb.run(scatter)
    bins = nb.add(
        "df['size'] = pd.cut(df['petal length (cm)'], bins=[0, 2, 5, 7], labels=['small', 'medium', 'large'])\n"
        "pd.crosstab(df['species'], df['size'])"
    )
    nb.run(bins)
    arr = nb.add("X = df[iris.feature_names].to_numpy()\nX[:5]")
    nb.run(arr)
    means = nb.add("X.mean(axis=0).round(3)")
    nb.run(means)
    wrong = nb.add("X[:, 4]")
    nb.run(wrong)
    nb.fix(wrong, "X[:, 4]", "X[:, 3].max()")
    nb.run(wrong)
    nb.run(counts)
    nb.save()
    nb.delete(wrong)
    nb.restart()
    nb.run_all()
    quantiles = nb.add("df.groupby('species')['sepal width (cm)'].quantile([0.25, 0.5, 0.75]).unstack()")
    nb.run(quantiles)
    box = nb.add("df.boxplot(column='sepal width (cm)', by='species', figsize=(5, 4))\nplt.show()")
    nb.run(box)
    nb.run(describe)
    nb.save()
