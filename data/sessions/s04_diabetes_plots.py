"""Plotting the diabetes data with matplotlib and pandas: histograms, scatter plots, subplots, a regression line.

The user iterates on figures (titles, sizes, colours), misnames a
matplotlib argument (AttributeError / TypeError), plots arrays of different
lengths (ValueError), restarts and re-runs to get a clean notebook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_04"
NOTEBOOK = "diabetes_plots.ipynb"
START = "2025-03-06T15:20:00+00:00"


def script(nb: Notebook) -> None:
    intro = nb.add("## Diabetes progression: plots", cell_type="markdown")
    nb.run(intro)
    imports = nb.add("import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\nfrom sklearn.datasets import load_diabetes")
    nb.run(imports)
    load = nb.add("diab = load_diabetes(as_frame=True, scaled=False)\ndf = diab.frame\ndf.head()")
    nb.run(load)
    desc = nb.add("df[['age', 'bmi', 'bp', 'target']].describe().T")
    nb.run(desc)
    hist = nb.add("df['target'].plot.hist(bins=30)")
    nb.run(hist)
    nb.fix(hist, "df['target'].plot.hist(bins=30)", "ax = df['target'].plot.hist(bins=30, edgecolor='black')\nax.set_xlabel('progression after one year')\nplt.show()")
    nb.run(hist)
    scatter = nb.add("plt.scatter(df['bmi'], df['target'], s=8, alpha=0.6)\nplt.xlabel('BMI')\nplt.ylabel('target')\nplt.show()")
    nb.run(scatter)
    color = nb.add("plt.scatter(df['bmi'], df['target'], c=df['sex'], cmap='coolwarm', s=8)\nplt.colorbar(label='sex')\nplt.show()")
    nb.run(color)
    title = nb.add("fig, ax = plt.subplots()\nax.scatter(df['bp'], df['target'], s=8)\nax.title('Blood pressure')")
    nb.run(title)
    nb.fix(title, "ax.title('Blood pressure')", "ax.set_title('Blood pressure')\nplt.show()")
    nb.run(title)
    corr = nb.add("corr = df.corr().round(2)\ncorr['target'].sort_values()")
    nb.run(corr)
    heat = nb.add(
        "fig, ax = plt.subplots(figsize=(6, 5))\n"
        "im = ax.imshow(corr, cmap='RdBu_r', vmin=-1, vmax=1)\n"
        "ax.set_xticks(range(len(corr)), corr.columns, rotation=90)\n"
        "ax.set_yticks(range(len(corr)), corr.columns)\n"
        "fig.colorbar(im)\nplt.show()"
    )
    nb.run(heat)
    nb.save()
    grid = nb.add(
        "fig, axes = plt.subplots(2, 2, figsize=(8, 6))\n"
        "for ax, col in zip(axes.flat, ['age', 'bmi', 'bp', 's5']):\n"
        "    ax.scatter(df[col], df['target'], s=3)\n"
        "    ax.set_title(col)\n"
        "fig.tight_layout()\nplt.show()"
    )
    nb.run(grid)
    nb.fix(grid, "plt.subplots(2, 2, figsize=(8, 6))", "plt.subplots(2, 3, figsize=(9, 5))")
    nb.fix(grid, "['age', 'bmi', 'bp', 's5']", "['age', 'bmi', 'bp', 's1', 's5', 's6']")
    nb.run(grid)
    fit = nb.add("slope, intercept = np.polyfit(df['bmi'], df['target'], 1)\nslope, intercept")
    nb.run(fit)
    line = nb.add(
        "xs = np.linspace(df['bmi'].min(), df['bmi'].max(), 50)\n"
        "plt.scatter(df['bmi'], df['target'], s=6, alpha=0.5)\n"
        "plt.plot(xs, slope * xs + intercept, color='red')\nplt.show()"
    )
    nb.run(line)
    bad_line = nb.add("plt.plot(xs, slope * df['bmi'] + intercept)")
    nb.run(bad_line)
    nb.fix(bad_line, "plt.plot(xs, slope * df['bmi'] + intercept)", "plt.plot(df['bmi'], slope * df['bmi'] + intercept, lw=1)\nplt.show()")
    nb.run(bad_line)
    nb.delete(bad_line)
    age_groups = nb.add(
        "df['age_group'] = pd.cut(df['age'], bins=[0, 30, 45, 60, 90], labels=['<30', '30-45', '45-60', '60+'])\n"
        "df.groupby('age_group', observed=True)['target'].mean().round(1)"
    )
    nb.run(age_groups)
    bar = nb.add("df.groupby('age_group', observed=True)['target'].mean().plot.bar(rot=0)\nplt.ylabel('mean target')\nplt.show()")
    nb.run(bar)
    box = nb.add("df.boxplot(column='target', by='sex')\nplt.suptitle('')\nplt.show()")
    nb.run(box)
    legend = nb.add(
        "for sex, part in df.groupby('sex'):\n"
        "    plt.hist(part['target'], bins=20, alpha=0.5, label=f'sex={sex:.0f}')\n"
        "plt.legend(loc='upper right', fontsize='small', frameon=Flase)\nplt.show()"
    )
    nb.run(legend)
    nb.fix(legend, "frameon=Flase", "frameon=False")
    nb.run(legend)
    nb.save()
    nb.restart()
    nb.run_all()
    nb.run(corr)
    pair = nb.add("pd.plotting.scatter_matrix(df[['bmi', 's5', 'target']], figsize=(6, 6), s=4)\nplt.show()")
    nb.run(pair)
    nb.fix(pair, "figsize=(6, 6), s=4)", "figsize=(5, 5), s=3, diagonal='kde')")
    nb.run(pair)
    nb.save()
