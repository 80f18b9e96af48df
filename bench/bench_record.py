"""Recording overhead: ``themisto record`` vs plain nbclient execution of the same notebook.

Both run a ~30-cell data-science notebook (pandas, numpy, scikit-learn toy
data, a plot, an error) in a fresh python3 kernel, start to shutdown.
Repetitions are interleaved and the median wall time of each is compared.
Target (issue 2): recording takes at most 1.5x plain execution.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

CELLS = [
    "import numpy as np\nimport pandas as pd",
    "from sklearn.datasets import load_iris, load_wine, load_diabetes",
    "iris = load_iris(as_frame=True)\ndf = iris.frame\ndf.head()",
    "df.describe()",
    "df.shape, df.dtypes.value_counts()",
    "df['species'] = iris.target_names[df['target']]\ndf['species'].value_counts()",
    "df.groupby('species').mean(numeric_only=True)",
    "df['ratio'] = df['petal length (cm)'] / df['petal width (cm)']\ndf['ratio'].describe()",
    "df.isna().sum().sum()",
    "df.loc[df['ratio'] > 5, ['species', 'ratio']].head(10)",
    "rng = np.random.default_rng(0)\nnoise = rng.normal(size=(150, 4))\nnoise.mean(axis=0).round(3)",
    "corr = df.drop(columns=['species']).corr()\ncorr.round(2)",
    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots()\ndf.plot.scatter(x='sepal length (cm)', y='petal length (cm)', ax=ax)\nplt.show()",
    "from sklearn.model_selection import train_test_split\n"
    "X = df[iris.feature_names]\ny = df['target']\n"
    "X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)\nX_train.shape",
    "from sklearn.linear_model import LogisticRegression\nclf = LogisticRegression(max_iter=500).fit(X_train, y_train)",
    "from sklearn.metrics import accuracy_score, classification_report\n"
    "accuracy_score(y_test, clf.predict(X_test))",
    "print(classification_report(y_test, clf.predict(X_test)))",
    "clf.coef_.round(2)",
    "wine = load_wine(as_frame=True).frame\nwine.shape",
    "wine.groupby('target').agg(['mean', 'std']).iloc[:, :4]",
    "from sklearn.ensemble import RandomForestClassifier\n"
    "forest = RandomForestClassifier(n_estimators=50, random_state=0)\n"
    "forest.fit(wine.drop(columns='target'), wine['target'])",
    "importances = pd.Series(forest.feature_importances_, index=wine.columns[:-1]).sort_values(ascending=False)\n"
    "importances.head()",
    "diabetes = load_diabetes(as_frame=True)\nreg_df = diabetes.frame\nreg_df.tail(3)",
    "from sklearn.linear_model import Ridge\nridge = Ridge(alpha=1.0).fit(reg_df.drop(columns='target'), reg_df['target'])\n"
    "round(ridge.score(reg_df.drop(columns='target'), reg_df['target']), 3)",
    "words = ' '.join(iris.target_names).upper().split()\nwords",
    "names = [name.replace(' (cm)', '').replace(' ', '_') for name in iris.feature_names]\nnames",
    "df.columns = names + list(df.columns[4:])\ndf.columns.tolist()",
    "df['sepal_area'] = df['sepal_length'] * df['sepal_width']\ndf['sepal_area'].max()",
    "df['missing_column']",
    "pivot = df.pivot_table(index='species', values=['sepal_area', 'ratio'], aggfunc='median')\npivot",
    "matrix = np.linalg.inv(np.eye(3) * 2)\nmatrix",
    "summary = {name: float(df[name].mean()) for name in names}\nsummary",
]


def _notebook(folder: Path) -> Path:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in CELLS]
    path = folder / "bench_notebook.ipynb"
    nbformat.write(notebook, path)
    return path


def _plain(path: Path) -> float:
    """Wall time of nbclient executing the notebook, kernel start to shutdown."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=600,
        allow_errors=True,
        shutdown_kernel="immediate",  # as the recorder does, so only the per-cell work differs
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    return time.perf_counter() - started


def _recorded(path: Path, out_dir: Path) -> float:
    """Wall time of ``record_source`` on the notebook, kernel start to shutdown."""
    from themisto.recorder import RecordOptions, record_source

    started = time.perf_counter()
    record_source(path, out_dir, RecordOptions(timeout=600, overwrite=True))
    return time.perf_counter() - started


def run(quick: bool = False) -> list[dict]:
    repetitions = 1 if quick else 3
    plain: list[float] = []
    recorded: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _notebook(folder)
        _plain(path)  # warm the OS file cache for the imports, so neither side pays for it
        for _ in range(repetitions):
            plain.append(_plain(path))
            recorded.append(_recorded(path, folder / "out"))
    ratio = statistics.median(recorded) / statistics.median(plain)
    return [
        {
            "benchmark": "record",
            "measure": f"record / plain nbclient wall time ({len(CELLS)} cells, median of {repetitions})",
            "target": "<= 1.5x",
            "value": f"{ratio:.2f}x ({statistics.median(recorded):.2f} s vs {statistics.median(plain):.2f} s)",
            "passed": ratio <= 1.5,
        }
    ]


if __name__ == "__main__":
    rows = run(quick="--quick" in sys.argv)
    keys = ["benchmark", "measure", "target", "value", "passed"]
    widths = {key: max(len(key), *(len(str(row[key])) for row in rows)) for key in keys}
    print("  ".join(key.ljust(widths[key]) for key in keys))
    for row in rows:
        print("  ".join(str(row[key]).ljust(widths[key]) for key in keys))
